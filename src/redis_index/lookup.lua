-- dedup-stream: read posting lists, for a worker to verify candidates
-- itself before it asks decide.lua to commit (see there). Reads only.
-- KEYS[1]: '{NAME}:meta'; ARGV[1]: this worker's settings; ARGV[2]: posting
-- keys, 4 bytes each.
-- Reply: each key's list of cells ('' for none), in order.
-- (prelude.lua, prepended, checks the settings and sets P, the prefix.)
local POSTINGS = P .. 'p'
local keys = ARGV[2]
local reply = {}
local wanted = {}
for at = 1, #keys, 4 do
  wanted[#wanted + 1] = string.sub(keys, at, at + 3)
  if #wanted == 500 or at + 4 > #keys then
    local lists = redis.call('HMGET', POSTINGS, unpack(wanted))
    for i = 1, #wanted do
      reply[#reply + 1] = lists[i] or ''
    end
    wanted = {}
  end
end
return reply
