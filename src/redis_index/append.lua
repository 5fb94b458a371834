-- dedup-stream: append a batch of prepared messages to an index's log.
-- Holds no rule of the decision: it numbers the entry and appends it.
-- KEYS[1]: '{NAME}:cfg', KEYS[2]: '{NAME}:log', KEYS[3]: '{NAME}:calls'.
-- ARGV[1]: the worker's settings, ARGV[2]: the epoch it applied,
-- ARGV[3]: the worker, ARGV[4]: its call number, ARGV[5]: the batch,
-- ARGV[6]: how many of its messages are checks (counted for `index info`).
-- Reply: {entry number, stream id, number of the newest snapshot}. A call
-- repeated (its reply was lost) is answered with its entry, not appended.
local cfg = redis.call('HMGET', KEYS[1], 'settings', 'epoch', 'snap_n')
if not cfg[1] then
  return redis.error_reply('DEDUP_NOINDEX the index does not exist')
end
if cfg[1] ~= ARGV[1] then
  return redis.error_reply('DEDUP_MISMATCH ' .. cfg[1])
end
if cfg[2] ~= ARGV[2] then
  return redis.error_reply('DEDUP_EPOCH ' .. tostring(cfg[2]))
end
local snap = tonumber(cfg[3] or '0')
local last = redis.call('HGET', KEYS[3], ARGV[3])
if last then
  local call, n, id = string.match(last, '^(%d+) (%d+) (.+)$')
  if call == ARGV[4] then
    return {tonumber(n), id, snap}
  end
end
local n = redis.call('HINCRBY', KEYS[1], 'n', 1)
redis.call('HINCRBY', KEYS[1], 'checked', ARGV[6])
local id = redis.call('XADD', KEYS[2], '*', 'n', n, 'w', ARGV[3], 'c', ARGV[4], 'b', ARGV[5])
redis.call('HSET', KEYS[3], ARGV[3], ARGV[4] .. ' ' .. n .. ' ' .. id)
return {n, id, snap}
