-- dedup-stream: read posting lists, for a worker to verify candidates
-- itself before it asks decide.lua to commit (see there). Reads only.
-- KEYS[1]: '{NAME}:meta'; ARGV[1]: this worker's settings; ARGV[2]: posting
-- records, 7 bytes each (bucket 3 bytes, key 4 bytes).
-- Reply: each record's list of cells ('' for none), in order.
local P = string.sub(KEYS[1], 1, -5)
local stored = redis.call('HGET', P .. 'cfg', 'settings')
if not stored then
  return redis.error_reply('DEDUP_NOINDEX the index does not exist')
end
if stored ~= ARGV[1] then
  return redis.error_reply('DEDUP_MISMATCH ' .. stored)
end
local POSTINGS = P .. 'p:'
local recs = ARGV[2]
local reply = {}
for at = 1, #recs, 7 do
  reply[#reply + 1] = redis.call('HGET', POSTINGS .. string.sub(recs, at, at + 2),
    string.sub(recs, at + 3, at + 6)) or ''
end
return reply
