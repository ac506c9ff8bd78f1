package adaptive

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"
)

// SumString returns the hash of s, as Sum does for bytes (a model's
// name, say). It does not allocate.
func (h KeyHasher) SumString(s string) uint64 { return maphash.String(h.seed, s) }

// QuotaKey names the quota at the provider that a request spends: its
// account and its model. Providers count per account (an API key's
// organisation and tier) and, within it, per model, and their rate-limit
// headers describe the bucket of the model that answered. Account is a
// KeyHasher hash of the client's credential (only read in passthrough
// mode: with an injected key there is one account), Model a hash of the
// model the request names. The zero key is one account's one model.
type QuotaKey struct{ Account, Model uint64 }

// Bounds of an upstream's accounts.
const (
	// maxModelsPerAccount bounds the models an account's quotas are
	// learned for: a client that names ever new models fills its own
	// places, not the table's. A model beyond them is not limited by a
	// learned quota.
	maxModelsPerAccount = 8
	// accountIdle is how long an account (or one of its models) must go
	// without a request before its place may go to a new one. Less, and
	// a flood of new keys would evict accounts that are in use between
	// two of their requests; a minute is the window most quotas refill
	// in, so a quota forgotten after it has mostly refilled.
	accountIdle      = time.Minute
	maxAccountShards = 64
)

// accountTable is an upstream's learned quotas, one per (account, model):
// the mirrors of what the provider reports in its rate-limit headers. In
// passthrough mode every credential is its own account; with an injected
// key there is one, and each model is kept as an account of its own
// (spread over the shards).
//
// Accounts are spread over shards by hash; a shard is a small map under
// its own mutex, held for a lookup only, never while waiting. An account's
// place and its models' quotas are allocated when first used and reused
// when an idle one gives its place to a new one: in steady state a
// request allocates nothing. A place is given up only by an account
// without a request in flight and idle for accountIdle; while none is, a
// new account (or a new model of a full account) has no learned quota,
// and its requests go unlimited by Sluice (the provider refuses what it
// must, and nothing is learned from its answers): a flood of new keys
// never evicts the accounts that are in use.
type accountTable struct {
	epoch       time.Time
	passthrough bool
	limits      atomic.Pointer[Limits] // configured: the starting point of every quota
	shards      []accountShard
	// learned: some quota learned a limit from the provider's headers (it
	// stays set: Rates.Needed then sends every request through Reserve).
	learned  atomic.Bool
	overflow atomic.Uint64 // lookups that found no place
}

type accountShard struct {
	mu       sync.Mutex
	m        map[uint64]*account
	accounts []*account // places in use, in m by key; at most size
	size     int
	_        [64]byte // shards on separate cache lines
}

// account is one account's place: its models' quotas. refs and last are
// guarded by its shard's mutex, and so are its models'.
type account struct {
	sh     *accountShard
	key    uint64
	refs   int32 // holds on any of its models
	last   int64 // unix ns of the latest lookup
	models [maxModelsPerAccount]*modelQuota
}

// modelQuota is the learned quota of one (account, model).
type modelQuota struct {
	acct *account
	key  uint64
	used bool
	refs int32
	last int64
	q    Quota
}

// newAccountTable builds a table of at most maxAccounts accounts, whose
// quotas start from the configured limits l.
func newAccountTable(epoch time.Time, l Limits, maxAccounts int, passthrough bool) *accountTable {
	n := min(maxAccountShards, maxAccounts)
	t := &accountTable{epoch: epoch, passthrough: passthrough, shards: make([]accountShard, n)}
	t.limits.Store(&l)
	for i := range t.shards {
		sh := &t.shards[i]
		sh.size = maxAccounts / n
		if i < maxAccounts%n {
			sh.size++
		}
		sh.m = make(map[uint64]*account)
	}
	return t
}

// placeOf maps a request's key to the table's account and model keys:
// with an injected key the account is the model.
func (t *accountTable) placeOf(k QuotaKey) (acct, model uint64) {
	if t.passthrough {
		return k.Account, k.Model
	}
	return k.Model, 0
}

// acquire returns the quota of k at now, held (give it back with
// release), or nil when k has no place (the table or the account's
// models are full of places in use).
func (t *accountTable) acquire(now time.Time, k QuotaKey) *modelQuota {
	ak, mk := t.placeOf(k)
	sh := &t.shards[ak%uint64(len(t.shards))]
	ns := now.UnixNano()
	sh.mu.Lock()
	a := sh.m[ak]
	if a == nil {
		if a = sh.placeLocked(ns, ak); a == nil {
			sh.mu.Unlock()
			t.overflow.Add(1)
			return nil
		}
	}
	mq := a.modelLocked(t, now, mk)
	if mq == nil {
		sh.mu.Unlock()
		t.overflow.Add(1)
		return nil
	}
	a.last, mq.last = ns, ns
	a.refs++
	mq.refs++
	sh.mu.Unlock()
	return mq
}

// release ends a hold taken by acquire (nil: nothing held).
func (t *accountTable) release(mq *modelQuota) { mq.release() }

// release ends a hold taken by accountTable.acquire (nil: nothing held).
func (mq *modelQuota) release() {
	if mq == nil {
		return
	}
	sh := mq.acct.sh
	sh.mu.Lock()
	mq.refs--
	mq.acct.refs--
	sh.mu.Unlock()
}

// placeLocked gives key a place: a new one while the shard has room,
// else the place of the account idle longest, if it has been idle for
// accountIdle with nothing in flight; nil otherwise.
func (sh *accountShard) placeLocked(ns int64, key uint64) *account {
	var a *account
	if len(sh.accounts) < sh.size {
		a = &account{sh: sh}
		sh.accounts = append(sh.accounts, a)
	} else {
		for _, c := range sh.accounts {
			if c.refs == 0 && ns-c.last >= int64(accountIdle) && (a == nil || c.last < a.last) {
				a = c
			}
		}
		if a == nil {
			return nil
		}
		delete(sh.m, a.key)
		for _, mq := range a.models {
			if mq != nil {
				mq.used = false
			}
		}
	}
	a.key = key
	sh.m[key] = a
	return a
}

// modelLocked returns the quota of model key in a, starting a new one in
// a free place or in the place of a model idle for accountIdle with
// nothing in flight; nil when there is none.
func (a *account) modelLocked(t *accountTable, now time.Time, key uint64) *modelQuota {
	ns := now.UnixNano()
	var free, idle *modelQuota
	freeAt := -1
	for i, mq := range a.models {
		switch {
		case mq == nil:
			if freeAt < 0 {
				freeAt = i
			}
		case mq.used && mq.key == key:
			return mq
		case !mq.used:
			if free == nil {
				free = mq
			}
		case mq.refs == 0 && ns-mq.last >= int64(accountIdle) && (idle == nil || mq.last < idle.last):
			idle = mq
		}
	}
	mq := free
	switch {
	case mq != nil:
	case freeAt >= 0:
		mq = &modelQuota{acct: a}
		a.models[freeAt] = mq
	case idle != nil:
		mq = idle
	default:
		return nil
	}
	mq.key, mq.used, mq.refs = key, true, 0
	mq.q.initQuota(now, t.epoch, *t.limits.Load(), true)
	return mq
}

// configure applies new configured limits to every quota, keeping what
// each learned where nothing is configured (see Quota.configure).
func (t *accountTable) configure(now time.Time, l Limits) {
	t.limits.Store(&l)
	t.each(func(mq *modelQuota) { mq.q.configure(now, l) })
}

// on reports whether a quota of the table may limit something: limits
// are configured, or one was learned.
func (t *accountTable) on() bool {
	return t.learned.Load() || t.limits.Load().Any()
}

// each calls f for every quota in use, under its shard's mutex.
func (t *accountTable) each(f func(*modelQuota)) {
	for i := range t.shards {
		sh := &t.shards[i]
		sh.mu.Lock()
		for _, a := range sh.accounts {
			for _, mq := range a.models {
				if mq != nil && mq.used {
					f(mq)
				}
			}
		}
		sh.mu.Unlock()
	}
}

// AccountStats are an upstream's learned quotas, for metrics and the
// status page.
type AccountStats struct {
	// Accounts is the number of accounts tracked, Quotas the number of
	// (account, model) quotas.
	Accounts, Quotas int
	// Overflow counts the lookups of an account or a model that found no
	// place (its requests were not limited by a learned quota).
	Overflow uint64
}

// stats counts the table at now and fills most with, by dimension, the
// quota that has spent the largest share of its capacity.
func (t *accountTable) stats(now time.Time, most *[NumDims]QuotaDimStats) AccountStats {
	s := AccountStats{Overflow: t.overflow.Load()}
	var share [NumDims]float64
	for i := range t.shards {
		sh := &t.shards[i]
		sh.mu.Lock()
		s.Accounts += len(sh.m)
		for _, a := range sh.accounts {
			for _, mq := range a.models {
				if mq == nil || !mq.used {
					continue
				}
				s.Quotas++
				for d := range NumDims {
					lv, c, ok := mq.q.Level(now, d)
					if !ok || c <= 0 {
						continue
					}
					if sp := 1 - float64(lv)/float64(c); most[d].Capacity == 0 || sp > share[d] {
						most[d], share[d] = QuotaDimStats{Level: lv, Capacity: c, Window: mq.q.Window(d)}, sp
					}
				}
			}
		}
		sh.mu.Unlock()
	}
	return s
}
