package adaptive

import (
	"hash/maphash"
	"sync"
	"time"
)

// KeyHasher turns a client's key (its API key, or the value of the
// configured header) into the 64-bit hash the rate layer tracks it by.
// The seed is random per process, so the hash cannot be looked up in a
// table of known keys, and raw keys are never stored. The zero value is
// not usable: call NewKeyHasher once.
type KeyHasher struct{ seed maphash.Seed }

// NewKeyHasher returns a hasher with a fresh random seed.
func NewKeyHasher() KeyHasher { return KeyHasher{seed: maphash.MakeSeed()} }

// Sum returns the hash of key. Every client without a key (an empty key)
// shares one hash, and so one quota. It does not allocate.
func (h KeyHasher) Sum(key []byte) uint64 { return maphash.Bytes(h.seed, key) }

// clientTable holds the quotas of at most maxKeys client keys. Keys are
// spread over shards by hash; a shard is a small map under its own mutex,
// held for a lookup only (never while waiting), so requests of different
// clients rarely meet. Entries are allocated once, when the table is
// built: a request never allocates, whatever the keys.
//
// When a new key arrives and its shard is full, the least recently used
// entry that no request holds and whose quota has refilled entirely is
// reused for it: forgetting a full quota loses nothing, so a key that
// comes back later finds what it would have had. An entry with a quota
// still spent is never reused, or rotating keys would buy a fresh quota
// each time: while no entry of the shard can be reused, a new key shares
// the overflow quota, which has the per-client limits, so a flood of new
// keys gets one client's worth, never more.
type clientTable struct {
	shards   []clientShard
	overflow clientEntry
}

type clientShard struct {
	mu      sync.Mutex
	limits  Limits
	m       map[uint64]*clientEntry
	entries []clientEntry // all of the shard's entries; in m once used
	used    int           // entries[:used] are in use
	_       [48]byte      // 128 bytes: shards on separate cache lines
}

// clientEntry is one client key's quota. refs and last are guarded by the
// shard's mutex (the overflow entry's refs are not counted).
type clientEntry struct {
	q    Quota
	key  uint64
	refs int32
	last int64 // unix ns of the last reservation, for eviction
}

const maxClientShards = 64

// newClientTable builds a table of maxKeys entries with limits, at now.
func newClientTable(now time.Time, epoch time.Time, l Limits, maxKeys int) *clientTable {
	n := min(maxClientShards, maxKeys)
	t := &clientTable{shards: make([]clientShard, n)}
	for i := range t.shards {
		sh := &t.shards[i]
		sh.limits = l
		size := maxKeys / n
		if i < maxKeys%n {
			size++
		}
		sh.entries = make([]clientEntry, size)
		sh.m = make(map[uint64]*clientEntry, size)
		for j := range sh.entries {
			sh.entries[j].q.initQuota(now, epoch, l, false)
		}
	}
	t.overflow.q.initQuota(now, epoch, l, false)
	return t
}

// acquire returns the entry of key at now, held (release it with
// release). It never allocates.
func (t *clientTable) acquire(now time.Time, key uint64) *clientEntry {
	sh := &t.shards[key%uint64(len(t.shards))]
	ns := now.UnixNano()
	sh.mu.Lock()
	e := sh.m[key]
	if e == nil {
		e = sh.evictLocked(now, key)
		if e == nil {
			sh.mu.Unlock()
			return &t.overflow
		}
	}
	e.refs++
	e.last = ns
	sh.mu.Unlock()
	return e
}

// evictLocked finds an entry for key: an unused one, else the least
// recently used entry that no request holds and whose quota is full again
// (reset, so that a learned debt cannot linger). nil when there is none.
func (sh *clientShard) evictLocked(now time.Time, key uint64) *clientEntry {
	var e *clientEntry
	if sh.used < len(sh.entries) {
		e = &sh.entries[sh.used]
		sh.used++
	} else {
		for i := range sh.entries {
			c := &sh.entries[i]
			if c.refs == 0 && (e == nil || c.last < e.last) && c.q.full(now) {
				e = c
			}
		}
		if e == nil {
			return nil
		}
		delete(sh.m, e.key)
		e.q.initQuota(now, e.q.clk.Epoch, sh.limits, false)
	}
	e.key = key
	sh.m[key] = e
	return e
}

// release ends a hold taken by acquire.
func (t *clientTable) release(e *clientEntry) {
	if e == &t.overflow {
		return
	}
	sh := &t.shards[e.key%uint64(len(t.shards))]
	sh.mu.Lock()
	e.refs--
	sh.mu.Unlock()
}

// reconfigure applies new per-client limits to every entry, keeping their
// tokens in use.
func (t *clientTable) reconfigure(now time.Time, l Limits) {
	for i := range t.shards {
		sh := &t.shards[i]
		sh.mu.Lock()
		sh.limits = l
		for j := range sh.entries {
			sh.entries[j].q.configure(now, l)
		}
		sh.mu.Unlock()
	}
	t.overflow.q.configure(now, l)
}

// tracked returns how many keys the table holds.
func (t *clientTable) tracked() int {
	n := 0
	for i := range t.shards {
		sh := &t.shards[i]
		sh.mu.Lock()
		n += len(sh.m)
		sh.mu.Unlock()
	}
	return n
}
