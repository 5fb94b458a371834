-- dedup-stream: create an index in Redis, or find the one there.
-- KEYS[1]: '{NAME}:meta'; ARGV[1]: this worker's settings.
-- Reply: the settings stored with the index (this worker's if it created it).
local P = string.sub(KEYS[1], 1, -5)
local stored = redis.call('HGET', P .. 'cfg', 'settings')
if stored then
  return stored
end
redis.call('HSET', P .. 'cfg', 'settings', ARGV[1])
redis.call('HSET', KEYS[1], 'seq', '0', 'len', '0', 'stamp', '0', 'evictions', '0')
return ARGV[1]
