package cluster

import "github.com/redis/go-redis/v9"

// luaClampLeases bounds the expiry of every lease in the sorted set
// KEYS[lk] to now + 2 × lease_ttl: a replica never sets one further
// (acquire and heartbeat set now + lease_ttl), so a later score is a value
// nobody published, and would hold a place of the ceiling for as long as
// it says.
const luaClampLeases = `
local function clampLeases(lk, ttl)
  local far = now + 2 * ttl
  local out = redis.call('ZRANGEBYSCORE', lk, '(' .. far, '+inf')
  for _, m in ipairs(out) do redis.call('ZADD', lk, far, m) end
end
`

// Every script reads the clock with TIME, so lease expiry and heartbeat
// ages are in Redis time only: clock skew between replicas changes
// nothing. Redis 7 replicates scripts by their effects, so reading TIME
// before writing is allowed.

// luaNow and luaBoot are shared preambles. luaBoot: when the boot key is
// missing, Redis lost the fleet's state (or this is the fleet's first
// script): mark it, and open a rebuild window during which no lease is
// granted while the replicas re-publish the leases they hold.
const luaNow = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
`

const luaBoot = `
local fresh = 0
if redis.call('EXISTS', KEYS[2]) == 0 then
  redis.call('SET', KEYS[2], now)
  redis.call('SET', KEYS[3], 1, 'PX', tonumber(ARGV[4]))
  fresh = 1
end
`

// heartbeatScript publishes one replica's beat, its demand and the leases
// it holds for each provider (re-adding any the store lost), and returns
// what the replica needs to compute its shares.
//
// KEYS: replicas, boot, rebuild, then per provider: demand, leases, freeze,
// baseline, limit.
// ARGV: id, prune_after_ms, key_ttl_ms, rebuild_ms, lease_ttl_ms,
// n_providers, then per provider: demand value, limit value, baseline
// value ("" while this replica has none), n_leases, lease ids...
// Returns: {now, fresh, {replica, score, ...}, per provider: demand hash
// (flat), leases in store, freeze until (or nil), baseline hash (flat),
// limit hash (flat)}.
var heartbeatScript = redis.NewScript(luaNow + luaBoot + luaClampLeases + `
local id = ARGV[1]
local keyTTL = tonumber(ARGV[3])
local leaseTTL = tonumber(ARGV[5])
redis.call('ZADD', KEYS[1], now, id)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - tonumber(ARGV[2]))
redis.call('PEXPIRE', KEYS[1], keyTTL)
local out = {now, fresh, redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')}
local a = 7
for i = 0, tonumber(ARGV[6]) - 1 do
  local dk, lk, fk, bk, ok = KEYS[4 + 5 * i], KEYS[5 + 5 * i], KEYS[6 + 5 * i], KEYS[7 + 5 * i], KEYS[8 + 5 * i]
  redis.call('HSET', dk, id, ARGV[a])
  redis.call('HSET', ok, id, ARGV[a + 1])
  if ARGV[a + 2] == '' then
    redis.call('HDEL', bk, id)
  else
    redis.call('HSET', bk, id, ARGV[a + 2])
  end
  a = a + 3
  for _, k in ipairs({dk, bk, ok}) do
    local fields = redis.call('HKEYS', k)
    for _, f in ipairs(fields) do
      if not redis.call('ZSCORE', KEYS[1], f) then redis.call('HDEL', k, f) end
    end
    if redis.call('EXISTS', k) == 1 then redis.call('PEXPIRE', k, keyTTL) end
  end
  local m = tonumber(ARGV[a])
  a = a + 1
  local batch = {}
  for j = 1, m do
    batch[#batch + 1] = now + leaseTTL
    batch[#batch + 1] = ARGV[a]
    a = a + 1
    if #batch >= 1000 or j == m then
      redis.call('ZADD', lk, unpack(batch))
      batch = {}
    end
  end
  redis.call('ZREMRANGEBYSCORE', lk, '-inf', now)
  clampLeases(lk, leaseTTL)
  if redis.call('EXISTS', lk) == 1 then redis.call('PEXPIRE', lk, leaseTTL * 2) end
  out[#out + 1] = redis.call('HGETALL', dk)
  out[#out + 1] = redis.call('ZCARD', lk)
  out[#out + 1] = redis.call('GET', fk)
  out[#out + 1] = redis.call('HGETALL', bk)
  out[#out + 1] = redis.call('HGETALL', ok)
end
return out
`)

// claimScript grants one replica's claims on the ceilings of its
// providers (share.go): for each, no more than it asks and than the
// other live replicas (a beat within dead_after) leave, each of them
// counted at the most of its permits in use and its own claim; and
// records the claim (or held, the claim in force until the answer
// arrives, if higher) in the replica's demand entry in the same step.
//
// KEYS: replicas, then per provider: demand.
// ARGV: id, dead_after_ms, n_providers, then per provider: inflight (now),
// waiting, ceiling, want, held, the fleet's ceiling.
// Returns per provider the claim granted.
var claimScript = redis.NewScript(luaNow + `
local id = ARGV[1]
local since = now - tonumber(ARGV[2])
local out = {}
local a = 4
for i = 1, tonumber(ARGV[3]) do
  local dk = KEYS[1 + i]
  local want, held, ceil = tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4]), tonumber(ARGV[a + 5])
  local others = 0
  local flat = redis.call('HGETALL', dk)
  for j = 1, #flat, 2 do
    local who = flat[j]
    local seen = who ~= id and redis.call('ZSCORE', KEYS[1], who)
    if seen and tonumber(seen) >= since then
      local f = {}
      for x in string.gmatch(flat[j + 1], '%S+') do f[#f + 1] = tonumber(x) end
      if #f == 4 and f[1] and f[4] then others = others + math.max(f[1], f[4]) end
    end
  end
  local g = math.max(0, math.min(want, ceil - others))
  redis.call('HSET', dk, id, ARGV[a] .. ' ' .. ARGV[a + 1] .. ' ' .. ARGV[a + 2] .. ' ' .. math.max(g, held))
  a = a + 6
  out[#out + 1] = g
end
return out
`)

// acquireScript takes one lease: prune expired leases, grant when fewer
// than the cap remain.
//
// KEYS: leases, boot, rebuild. ARGV: cap, lease_ttl_ms, lease id,
// rebuild_ms. Returns 1 granted, 0 full, -1 rebuilding (state was lost).
var acquireScript = redis.NewScript(luaNow + luaBoot + luaClampLeases + `
if fresh == 1 or redis.call('EXISTS', KEYS[3]) == 1 then return -1 end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
clampLeases(KEYS[1], tonumber(ARGV[2]))
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[1]) then return 0 end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[3])
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]) * 2)
return 1
`)

// releaseScript returns leases and prunes expired ones.
// KEYS: leases. ARGV: lease ids. Returns how many were removed.
var releaseScript = redis.NewScript(luaNow + `
local n = 0
for i = 1, #ARGV, 1000 do
  n = n + redis.call('ZREM', KEYS[1], unpack(ARGV, i, math.min(i + 999, #ARGV)))
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
return n
`)

// freezeScript raises a provider's fleet-wide freeze deadline and, when
// it moved, tells the other replicas at once. A deadline in store further
// than max_ms from now is one no replica published, and does not hold
// back a real one.
// KEYS: freeze. ARGV: until_ms, channel, message, max_ms. Returns 1 if it
// moved.
var freezeScript = redis.NewScript(luaNow + `
local deadline = tonumber(ARGV[1])
local cur = tonumber(redis.call('GET', KEYS[1]) or '0') or 0
if cur > now + tonumber(ARGV[4]) then cur = 0 end
if deadline <= cur then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PXAT', ARGV[1])
redis.call('PUBLISH', ARGV[2], ARGV[3])
return 1
`)

// leaveScript removes a replica that stops cleanly, so the others take
// its share at once instead of after three missed heartbeats.
// KEYS: replicas, demand keys... ARGV: id, channel, message.
var leaveScript = redis.NewScript(`
redis.call('ZREM', KEYS[1], ARGV[1])
for i = 2, #KEYS do redis.call('HDEL', KEYS[i], ARGV[1]) end
redis.call('PUBLISH', ARGV[2], ARGV[3])
return 1
`)

// rateScript syncs a replica's pools with the fleet's token buckets, one
// hash per provider: for each dimension d, l<d> is the bucket's level
// (tokens, fractional), t<d> when it was last updated (Redis time, µs),
// H<d> the tokens the replicas' pools hold (h<d>:<id> each, as reported at
// their last sync, plus what it granted them), u<d> the tokens out of the
// bucket net of what came back (granted - given); per replica s:<id> is
// the sequence number of its last sync and r:<id> that sync's answer. The
// bucket refills up to its capacity less what the pools hold, so tokens
// parked in pools never add to a full bucket: the bucket and the pools
// together hold at most the capacity. A replica that has not synced for
// stale_us (it died, or cannot reach Redis) is forgotten with what its
// pool held. A sync whose sequence number was applied already gets the
// stored answer again and changes nothing: a lost answer never applies a
// hand-back or a charge twice. A missing bucket is full.
//
// KEYS: per provider, its rate hash and its sorted set of replicas by
// last sync. ARGV: replica, seq, stale_us, n_providers, then per provider:
// n_dims, then per dimension: dim, capacity, window_us, give, want, held
// (the pool after give). Returns per provider "dim granted level,..."
// (level floored; negative is debt).
var rateScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local id, seq, stale = ARGV[1], ARGV[2], tonumber(ARGV[3])
local a = 5
local out = {}
for i = 1, tonumber(ARGV[4]) do
  local k, z = KEYS[2 * i - 1], KEYS[2 * i]
  local nd = tonumber(ARGV[a])
  a = a + 1
  for _, x in ipairs(redis.call('ZRANGEBYSCORE', z, '-inf', string.format('%.0f', now - stale))) do
    for d = 0, 3 do
      local h = tonumber(redis.call('HGET', k, 'h' .. d .. ':' .. x) or '0')
      if h ~= 0 then redis.call('HINCRBY', k, 'H' .. d, -h) end
      redis.call('HDEL', k, 'h' .. d .. ':' .. x)
    end
    redis.call('HDEL', k, 's:' .. x, 'r:' .. x)
    redis.call('ZREM', z, x)
  end
  redis.call('ZADD', z, string.format('%.0f', now), id)
  if redis.call('HGET', k, 's:' .. id) == seq then
    out[#out + 1] = redis.call('HGET', k, 'r:' .. id)
    a = a + 6 * nd
  else
    local res = {}
    local ttl = 1000
    for j = 1, nd do
      local d, cap, win = ARGV[a], tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
      local give, want, held = tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4]), tonumber(ARGV[a + 5])
      a = a + 6
      local hk = 'h' .. d .. ':' .. id
      local H = tonumber(redis.call('HGET', k, 'H' .. d) or '0') - tonumber(redis.call('HGET', k, hk) or '0') + held
      local l = tonumber(redis.call('HGET', k, 'l' .. d) or cap)
      local lt = tonumber(redis.call('HGET', k, 't' .. d) or now)
      if now > lt then l = l + (now - lt) * cap / win end
      l = math.min(cap - H, l)
      if give > 0 then l = math.min(cap - H, l + give) else l = l + give end
      local g = math.max(0, math.min(want, math.floor(l)))
      l = l - g
      redis.call('HSET', k, 'l' .. d, string.format('%.6f', l), 't' .. d, string.format('%.0f', now),
        'H' .. d, string.format('%.0f', H + g), hk, string.format('%.0f', held + g))
      redis.call('HINCRBY', k, 'u' .. d, g - give)
      res[#res + 1] = d .. ' ' .. g .. ' ' .. math.floor(l)
      ttl = math.max(ttl, 2 * math.floor(win / 1000))
    end
    local r = table.concat(res, ',')
    redis.call('HSET', k, 's:' .. id, seq, 'r:' .. id, r)
    redis.call('PEXPIRE', k, ttl)
    redis.call('PEXPIRE', z, ttl)
    out[#out + 1] = r
  end
end
return out
`)
