package redisnode

import (
	goredis "github.com/redis/go-redis/v9"
)

// Each script runs atomically on one server: that is what makes "set only if
// absent, then bump the counter" or "delete only if still ours" safe without
// a transaction. Keys are passed as KEYS (never built inside a script), and
// both keys of a lock share the hash tag {<key>}, so they live in one Redis
// Cluster slot and a script may touch both.

// LockKey is the Redis key holding the lease id of the current holder of
// key, with a TTL: stockguard:{<key>}:lock (DESIGN.md, "Names others rely on").
func LockKey(key string) string { return "stockguard:{" + key + "}:lock" }

// FenceKey is the Redis key holding the fencing counter of key:
// stockguard:{<key>}:fence. It never expires: a counter that vanished would
// hand out tokens the store has already seen.
func FenceKey(key string) string { return "stockguard:{" + key + "}:fence" }

// WakeKey names the list a release pushes to and waiters block on.
func WakeKey(key string) string { return "stockguard:{" + key + "}:wake" }

// WaitKey names the flag a refused single-server acquisition leaves, with
// a TTL longer than any one wait for a wake-up: someone may be blocked on
// the wake list. A release wakes (WakeIfOurs) only where it finds the flag,
// so the common release on many keys, where nobody waited, writes no list.
func WaitKey(key string) string { return "stockguard:{" + key + "}:waiting" }

// WokeKey names the marker of the wake-up of the hold of key under lease
// id: stockguard:{<key>}:woke:<id>. A release sets it when it wakes, so a
// repeat of that release (its reply was lost, and it was sent again, or
// went on in the background) wakes nobody: one hold, one wake-up.
func WokeKey(key, id string) string { return "stockguard:{" + key + "}:woke:" + id }

// Every script takes a batch: any number of keys of one lock operation in
// one call, so a batch of keys costs one round trip per server per phase.
// The per-key steps are the same as for a single key and each key keeps its
// own lease id, token and outcome; the script only saves the round trips.
// (These servers are independent masters, not a Redis Cluster: a script may
// touch keys of many slots.)

// acquireIncrScript takes each lock and, only where it did, increments that
// key's fence counter; both in one script so that no acquisition can get a
// token without the lock or the lock without a token. Where the lock is
// held it sets the key's wait flag (WaitKey) in the same atomic step, so
// the holder's release, which comes after this refusal, sees it; the flag
// holds its own TTL, so that a release can renew it. KEYS: lock, fence,
// wait flag per key. ARGV: TTL in ms, the wait flag's TTL in ms, then a
// lease id per key. Returns per key the new counter value, or 0 when the
// lock is held (INCR never yields 0 on a counter that started at 0).
var acquireIncrScript = goredis.NewScript(`
local out = {}
for i = 1, #ARGV - 2 do
  if redis.call('SET', KEYS[3*i-2], ARGV[i+2], 'NX', 'PX', ARGV[1]) then
    out[i] = redis.call('INCR', KEYS[3*i-1])
  else
    redis.call('SET', KEYS[3*i], ARGV[2], 'PX', ARGV[2])
    out[i] = 0
  end
end
return out
`)

// acquireBumpScript is Redlock's round 1 on one node: take each lock and,
// where it did, increment that key's fence counter in the same atomic step,
// so the value returned is the counter as of the moment this node granted
// us the lock, bumped under that grant. Where the lock is held elsewhere the
// counter is only read: a larger maximum is still a correct lower bound for
// the next token. KEYS: lock, fence per key. ARGV: TTL in ms, then a lease
// id per key. Returns per key a flag — 2 acquired and incremented, 1
// acquired but not incremented, or, held, the holder's lease id (so that an
// attempt tells a key one lease holds on a majority from a split vote) —
// followed by the counter: an
// integer below 2^53 (where Lua's doubles are exact) after INCR, otherwise
// the decimal string read back, so it survives unrounded. A counter INCR
// refuses (at 2^63 − 1 or beyond, which round 2 may have written) is read
// and left alone: that key then takes round 2.
var acquireBumpScript = goredis.NewScript(`
local out = {}
for i = 1, #ARGV - 1 do
  local fence = KEYS[2*i]
  if redis.call('SET', KEYS[2*i-1], ARGV[i+1], 'NX', 'PX', ARGV[1]) then
    out[2*i-1] = 1
    local v = redis.pcall('INCR', fence)
    if type(v) == 'number' then
      out[2*i-1] = 2
      if v < 9007199254740992 then out[2*i] = v end
    end
  else
    out[2*i-1] = redis.call('GET', KEYS[2*i-1])
  end
  if out[2*i] == nil then out[2*i] = redis.call('GET', fence) or '0' end
end
return out
`)

// setNXScript is round 1 without fencing: SET NX PX on each lock. KEYS: lock
// per key. ARGV: TTL in ms, then a lease id per key. Returns per key 1
// (acquired) or the holder's lease id (held).
var setNXScript = goredis.NewScript(`
local out = {}
for i = 1, #KEYS do
  out[i] = redis.call('SET', KEYS[i], ARGV[i+1], 'NX', 'PX', ARGV[1]) and 1 or redis.call('GET', KEYS[i])
end
return out
`)

// fenceScript is Redlock's round 2 on one node: raise each key's counter to
// its token if the counter is below it — whether or not this node holds our
// lock, so that every node that answers learns the token (a node that did
// not grant us the lock still remembers the token after a node that did
// restarts empty) — and report whether it counts: only a node that still
// holds our lock value (so a holder whose lock expired here cannot publish
// its token) and whose counter was below the token (so two acquisitions can
// never both publish one token on a node). Numbers are compared as canonical
// decimal strings (shorter is smaller, then lexicographic), exact up to 2^64
// where Lua's doubles are not. KEYS: lock, fence per key. ARGV: lease id,
// token per key. Returns per key 1 when raised under our lock, 0 when the
// lock is not ours, -1 when the counter is not below the token.
var fenceScript = goredis.NewScript(`
local out = {}
for i = 1, #KEYS / 2 do
  local cur = redis.call('GET', KEYS[2*i]) or '0'
  local tok = ARGV[2*i]
  local below = #cur < #tok or (#cur == #tok and cur < tok)
  if below then redis.call('SET', KEYS[2*i], tok) end
  if redis.call('GET', KEYS[2*i-1]) ~= ARGV[2*i-1] then
    out[i] = 0
  elseif below then
    out[i] = 1
  else
    out[i] = -1
  end
end
return out
`)

// releaseScript deletes each lock only if it still holds our lease id, so a
// holder whose lease expired can never delete the next holder's lock, and,
// where asked to, wakes one waiter: it leaves one element in the key's wake
// list, which the waiter blocked longest on it (AwaitRelease) pops. Nobody
// blocked: the element waits for the next waiter, kept to one and
// expiring, so a stale wake-up costs one early attempt. WakeIfOurs wakes
// only where a refused acquisition left the key's wait flag and the last
// wake-up was taken. Without the flag no one can be waiting: a waiter
// blocks only after a refusal, which sets the flag before this release can
// run, or after a release of its own that woke someone (below). With a
// wake-up still in the list no one is blocked (Redis hands a push to a
// blocked client at once), and one arriving pops it. Either way the list is
// not written. A release that wakes renews the flag for its whole TTL: a
// Locker that let go of a key and wants it again awaits a wake-up without
// being refused (retry's yield), and while a hot key changes hands among
// waiters nobody is refused, so a flag left to the refusals alone would
// expire under them and leave such a waiter asleep for its whole wait.
// A hold wakes at most once: the push goes only with the hold's wake
// marker (WokeKey) set for the first time, so a repeat of the release (a
// try whose reply was lost ran after all, say once a paused server
// resumed, and the next try, or the background, ran too) sends no second
// waiter into the lock. KEYS: lock, wake list, wait flag, wake marker per
// key. ARGV: the wake list's TTL in ms, the wake marker's TTL in ms, then
// per key the lease id and the Wake: "1" to wake if the lock was ours here
// and someone may be blocked, "2" to wake whether or not, "0" not to.
// Returns how many locks it deleted, then per key a bit field: 1 where it
// woke, 2 where it deleted our lock (which confirms the delete of a write
// whose reply was lost: see Node.Release).
var releaseScript = goredis.NewScript(`
local out = {0}
for i = 1, #KEYS / 4 do
  local ours = redis.call('GET', KEYS[4*i-3]) == ARGV[2*i+1]
  out[i+1] = 0
  if ours then
    redis.call('DEL', KEYS[4*i-3])
    out[1] = out[1] + 1
    out[i+1] = 2
  end
  local wake = ARGV[2*i+2]
  local push = wake == '2'
  local flag = false
  if ours and wake == '1' then
    flag = redis.call('GET', KEYS[4*i-1])
    push = flag and redis.call('LLEN', KEYS[4*i-2]) == 0
  end
  if push and redis.call('SET', KEYS[4*i], '1', 'NX', 'PX', ARGV[2]) then
    if flag then redis.call('SET', KEYS[4*i-1], flag, 'PX', flag) end
    redis.call('LPUSH', KEYS[4*i-2], '1')
    redis.call('LTRIM', KEYS[4*i-2], 0, 0)
    redis.call('PEXPIRE', KEYS[4*i-2], ARGV[1])
    out[i+1] = out[i+1] + 1
  end
end
return out
`)

// extendScript resets the lock's TTL only if it still holds our lease id: extending
// someone else's lock would stretch their lease, not ours. KEYS: lock. ARGV:
// lease id, TTL in ms. Returns 1 when extended, 0 when the lock was not ours.
var extendScript = goredis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
`)
