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

// keys returns the two keys of key in the order every script expects them.
func keys(key string) []string { return []string{LockKey(key), FenceKey(key)} }

// acquireIncrScript takes the lock and, only if it did, increments the fence
// counter; both in one script so that no acquisition can get a token without
// the lock or the lock without a token. KEYS: lock, fence. ARGV: lease id,
// TTL in ms. Returns the new counter value, or 0 when the lock is held (INCR
// never yields 0 on a counter that started at 0).
var acquireIncrScript = goredis.NewScript(`
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return redis.call('INCR', KEYS[2])
end
return 0
`)

// acquireReadScript is Redlock's round 1 on one node: take the lock and read the
// node's fence counter in one atomic step, so the value read is the counter
// as of the moment this node granted us the lock. The counter is read (and
// returned) when the lock is held elsewhere too: a larger maximum is still a
// correct lower bound for the next token. KEYS: lock, fence. ARGV: lease id,
// TTL in ms. Returns {1, counter} when acquired, {0, counter} when held; the
// counter as a decimal string so it survives Lua's doubles unrounded.
var acquireReadScript = goredis.NewScript(`
local ok = redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])
local f = redis.call('GET', KEYS[2]) or '0'
if ok then return {1, f} end
return {0, f}
`)

// fenceScript is Redlock's round 2 on one node: raise the node's counter to the
// token, only while this node still holds our lock value (so a holder whose
// lock expired here cannot publish its token) and only if the counter is
// below the token (so two acquisitions can never both publish one token on a
// node). Numbers are compared as canonical decimal strings (shorter is
// smaller, then lexicographic), exact up to 2^64 where Lua's doubles are not.
// KEYS: lock, fence. ARGV: lease id, token. Returns 1 when raised, 0 when the
// lock is not ours, -1 when the counter is not below the token.
var fenceScript = goredis.NewScript(`
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
local cur = redis.call('GET', KEYS[2]) or '0'
local tok = ARGV[2]
if #cur < #tok or (#cur == #tok and cur < tok) then
  redis.call('SET', KEYS[2], tok)
  return 1
end
return -1
`)

// releaseScript deletes the lock only if it still holds our lease id, so a holder
// whose lease expired can never delete the next holder's lock. KEYS: lock.
// ARGV: lease id. Returns 1 when deleted, 0 when the lock was not ours.
var releaseScript = goredis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
`)

// releaseWakeScript is releaseScript that also wakes one waiter: after the
// delete, it leaves one element in the key's wake list, which the waiter
// blocked longest on it (AwaitRelease) pops. Nobody blocked: the element
// waits for the next waiter, kept to one and expiring, so a stale wake-up
// costs one early attempt. KEYS: lock, wake list. ARGV: lease id, the wake
// list's TTL in ms. Returns 1 when deleted, 0 when the lock was not ours
// (and then wakes nobody).
var releaseWakeScript = goredis.NewScript(`
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
redis.call('LPUSH', KEYS[2], '1')
redis.call('LTRIM', KEYS[2], 0, 0)
redis.call('PEXPIRE', KEYS[2], ARGV[2])
return 1
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
