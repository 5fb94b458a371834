-- dedup-stream: the start of every script of an index in Redis (prepended
-- to lookup.lua and decide.lua): the index must exist and have been made
-- with this worker's settings.
-- KEYS[1]: '{NAME}:meta'; ARGV[1]: this worker's settings.
local P = string.sub(KEYS[1], 1, -5)
local stored = redis.call('HGET', P .. 'cfg', 'settings')
if not stored then
  return redis.error_reply('DEDUP_NOINDEX the index does not exist')
end
if stored ~= ARGV[1] then
  return redis.error_reply('DEDUP_MISMATCH ' .. stored)
end
