-- dedup-stream: create an index in Redis, or find the one there.
-- KEYS[1]: '{NAME}:cfg'; ARGV[1]: this worker's settings; ARGV[2]: an epoch
-- for a new index (names this incarnation of it).
-- Reply: {settings, epoch} stored with the index (this worker's if it
-- created it).
local stored = redis.call('HMGET', KEYS[1], 'settings', 'epoch')
if stored[1] then
  return {stored[1], stored[2] or ''}
end
redis.call('HSET', KEYS[1], 'settings', ARGV[1], 'epoch', ARGV[2], 'n', '0')
return {ARGV[1], ARGV[2]}
