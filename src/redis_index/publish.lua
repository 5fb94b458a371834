-- dedup-stream: make a worker's snapshot the index's newest, and trim the
-- log behind the one it replaces (a worker that appended just before
-- still finds its entry). Holds no rule of the decision.
-- KEYS[1]: '{NAME}:cfg', KEYS[2]: '{NAME}:log', KEYS[3]: '{NAME}:snaplock'.
-- ARGV: settings, epoch, worker, entry number, stream id, chunks, checksum,
-- messages indexed, evictions, bytes.
-- Reply: 1 if published; 0 if not (another is newer, the lock was lost,
-- or the log no longer reaches that entry: the worker removes its chunks).
local cfg = redis.call('HMGET', KEYS[1], 'settings', 'epoch', 'snap_n', 'snap_id', 'snap_chunks', 'n')
if cfg[1] ~= ARGV[1] or cfg[2] ~= ARGV[2] then
  return 0
end
if redis.call('GET', KEYS[3]) ~= ARGV[3] then
  return 0
end
redis.call('DEL', KEYS[3])
local n = tonumber(ARGV[4])
local old = tonumber(cfg[3] or '0')
if n <= old or n > tonumber(cfg[6] or '0') then
  return 0
end
local prefix = string.sub(KEYS[1], 1, -4)
if cfg[5] then
  for i = 0, tonumber(cfg[5]) - 1 do
    redis.call('UNLINK', prefix .. 'snap:' .. old .. ':' .. i)
  end
end
if cfg[4] then
  redis.call('XTRIM', KEYS[2], 'MINID', cfg[4])
end
-- Forget the last calls of workers silent for a week (restarted workers
-- have new names): a call is repeated within its timeout, not a week on.
local week = (tonumber(redis.call('TIME')[1]) - 7 * 86400) * 1000
local calls = redis.call('HGETALL', prefix .. 'calls')
for i = 1, #calls, 2 do
  local ms = tonumber(string.match(calls[i + 1], ' (%d+)%-%d+$'))
  if ms and ms < week then
    redis.call('HDEL', prefix .. 'calls', calls[i])
  end
end
redis.call('HSET', KEYS[1], 'snap_n', ARGV[4], 'snap_id', ARGV[5], 'snap_chunks', ARGV[6],
  'snap_crc', ARGV[7], 'snap_len', ARGV[8], 'snap_evictions', ARGV[9], 'snap_bytes', ARGV[10])
return 1
