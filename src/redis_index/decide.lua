-- dedup-stream: decide a batch of messages against an index kept in Redis.
--
-- One call decides many messages, in order; Redis runs a script alone, so
-- each decision (exact lookup, candidates, exact verification, refresh,
-- insert, eviction) is atomic and sees every decision before it. It is the
-- in-memory engine's decision (src/engine/mod.rs, index.rs, postings.rs,
-- verdict.rs) step for step; tests hold the two outputs byte for byte.
--
-- Keys, all under the prefix '{NAME}:' (one hash slot):
--   meta            hash: seq (next arrival number), len (messages indexed),
--                   slots (slots ever used; absent: len), stamp (last
--                   recency stamp), evictions, newest (under a window: the
--                   newest message time seen)
--   cfg             hash: settings (the text every worker must match)
--   lru             sorted set: slot -> recency stamp (lowest: evicted next)
--   e:<slot>        string: one indexed message (slot: 4 bytes, big-endian)
--                   seq (2 x u32) | n keys (u8) | n shingles (u32) |
--                   posting keys (u32 each) | shingles (u32 each) |
--                   id length (u32) | id (JSON) | cluster (JSON; empty when
--                   it is the message's own id: it was new)
--   p               hash: posting key (4 bytes) -> cells, in order of
--                   insertion: slot (4 bytes) and the low 32 bits of its
--                   message's seq, so a cell names one message, not just a
--                   place. One hash, so a call reads and writes every list
--                   it needs in a few commands, not one per list.
--   t               sorted set, under a window: slot -> the message's time
--                   (ms since the epoch; engine/window.rs)
--   free            list, under a window: slots emptied by expiry, filled
--                   before new ones
--   memo:<scope>    hash: message token -> the verdict it got (or call
--                   token -> the whole reply), so that a message asked again
--                   (a lost reply, a redelivered queue entry) gets the same
--                   verdict instead of a second one
--
-- Every list, entry and recency change of a call is kept here and written
-- at its end, in a few commands: the cost of a call into Redis from Lua is
-- paid per call, not per message.
--
-- A worker may send, with a message, a claim: the verdict it computed from
-- the posting lists it read just before, and what those lists were. When
-- the lists are still what the worker read, the candidates are the same
-- messages, so the claim is the verdict this script would compute, and it
-- is taken as it is: the exact verification runs on the workers. Messages
-- added to the lists since (earlier in this call, or by another worker) are
-- verified here; only when the claimed match itself is gone, or a list
-- cannot be matched with what was read, does the script decide it all.
--
-- KEYS[1]: '{NAME}:meta'.
-- ARGV: settings, capacity, max_bucket, threshold and the lone-match bars ("T B N"), measure ('j' or 'c'),
--   containment's bounds ("3,2,3,B,C,R,M,X", below), most shingles a set keeps (a longer
--   text's set is its smallest ones), memo scope ('' for none), flags ('r':
--   look tokens up in the memo first; 'c': empty the memo first), the call's
--   token ('' when the messages carry their own), the posting lists the
--   worker read for its claims, concatenated in the order the messages first
--   name their keys ('' for none), the number of message tokens to forget,
--   those tokens, then five per message: op ('c' check,
--   'q' query) followed by the message's time (two u32: ms since the epoch)
--   and its token, the posting keys (u32 each:
--   band and anchor keys, then the exact-set key), the sorted shingle set
--   (u32 each), the id's JSON, the claim ('' for none): flags byte (1: an
--   exact copy, 2: a match, 4/8/16: the message's first/second/third anchor
--   was a copy's on the list as read), the exact copy's cell, the match's cell, shared,
--   of (u32 each), the id's length (u16) and the matched id, the cluster's
--   length (u16) and the matched cluster, then each key's list as read:
--   its length in bytes (u16) and its last cell (8 bytes, zeros when
--   empty).
-- Reply: one verdict per message ('n', or 'd' .. shared u32 .. of u32 ..
--   the matched id's length u32 .. matched id .. its cluster), then the
--   number of messages indexed, of evictions, and of claims not taken.

-- (prelude.lua, prepended, checks the settings and sets P, the prefix.)

-- The window in ms (--window), from the settings; nil for none.
local window = tonumber(string.match(ARGV[1], ' window_ms=(%d+)'))

local capacity = tonumber(ARGV[2])
local max_bucket = tonumber(ARGV[3])
-- The threshold, and a lone recent match's bar and near bar
-- (engine::verdict::LoneMatch), as the worker computed them.
local threshold, lone_bar, near_bar = string.match(ARGV[4], '^(%S+) (%S+) (%S+)$')
threshold, lone_bar, near_bar = tonumber(threshold), tonumber(lone_bar), tonumber(near_bar)
local jaccard = ARGV[5] == 'j'
-- Containment's bounds (engine::verdict::by_containment): the fewest
-- shingles, and the share num/den of the longer set an earlier, shorter
-- message must reach; the number of LSH bands, past which a message's keys
-- are its anchors (then the exact-set key, last); and the most clusters
-- the messages on an anchor's list may span for the anchor to count
-- (engine::MAX_ANCHOR_CLUSTERS); how many arrivals back a lone recent match
-- reaches (0: never) and the fewest and most shingles its texts may have.
local min_contained, share_num, share_den, bands, max_anchor_clusters, recent, min_recent,
  max_recent = string.match(ARGV[6], '^(%d+),(%d+),(%d+),(%d+),(%d+),(%d+),(%d+),(%d+)$')
min_contained, share_num, share_den, bands, max_anchor_clusters, recent, min_recent, max_recent =
  tonumber(min_contained), tonumber(share_num), tonumber(share_den), tonumber(bands),
  tonumber(max_anchor_clusters), tonumber(recent), tonumber(min_recent), tonumber(max_recent)
-- The anchor keys of the message being decided, and whether its text was
-- cut (set for each message).
local my_anchors = {}
local my_specific = {}
local my_cut = false
local max_shingles = tonumber(ARGV[7])
local memo_key = P .. 'memo:' .. ARGV[8]
local has_memo = ARGV[8] ~= ''
local look_up_memo = has_memo and string.find(ARGV[9], 'r', 1, true) ~= nil
local call_token = ARGV[10]
local snapshot = ARGV[11]
local nforget = tonumber(ARGV[12])
local first = 13 + nforget

-- Commands over many arguments go in chunks that Lua's stack holds.
local CHUNK = 500
local function chunked(command, key, list, per)
  local i = 1
  while i <= #list do
    local j = math.min(i + CHUNK * per - 1, #list)
    if key then
      redis.call(command, key, unpack(list, i, j))
    else
      redis.call(command, unpack(list, i, j))
    end
    i = j + 1
  end
end

if has_memo and string.find(ARGV[9], 'c', 1, true) then
  redis.call('DEL', memo_key)
end
if look_up_memo and call_token ~= '' then
  local answered = redis.call('HGET', memo_key, call_token)
  if answered then
    return cmsgpack.unpack(answered)
  end
end
if nforget > 0 then
  local tokens = {}
  for i = 13, first - 1 do
    tokens[#tokens + 1] = ARGV[i]
  end
  chunked('HDEL', memo_key, tokens, 1)
end

local meta = redis.call('HMGET', KEYS[1], 'seq', 'len', 'stamp', 'evictions', 'newest', 'slots')
local seq = tonumber(meta[1]) or 0
local len = tonumber(meta[2]) or 0
local stamp = tonumber(meta[3]) or 0
local evictions = tonumber(meta[4]) or 0
local newest = tonumber(meta[5])
local slots = tonumber(meta[6]) or len

local LRU = P .. 'lru'
local ENTRY = P .. 'e:'
local POSTINGS = P .. 'p'
local TIMES = P .. 't'
local FREE = P .. 'free'
local TWO32 = 4294967296

-- Integers as Redis reads them (Lua would print large ones with an exponent).
local function int(n)
  return string.format('%.0f', n)
end

-- The lists, entries and recency this call has read or changed; what it
-- changed is written at the end.
local posting_cache = {}
local dirty_postings = {}
local entry_cache = {}
local dirty_entries = {}
local parsed_cache = {}
local pending_stamps = {}
local claims_refused = 0
-- Set below: whether the lists are still all as the worker read them.
local all_fresh = false

-- Reads into the cache the lists of `keys` it lacks, in one command.
local function load_postings(keys)
  local wanted, seen = {}, {}
  for _, key in ipairs(keys) do
    if posting_cache[key] == nil and not seen[key] then
      seen[key] = true
      wanted[#wanted + 1] = key
    end
  end
  local i = 1
  while i <= #wanted do
    local j = math.min(i + CHUNK - 1, #wanted)
    local lists = redis.call('HMGET', POSTINGS, unpack(wanted, i, j))
    for k = i, j do
      posting_cache[wanted[k]] = lists[k - i + 1] or ''
    end
    i = j + 1
  end
end

local function postings(key)
  local v = posting_cache[key]
  if v == nil then
    v = redis.call('HGET', POSTINGS, key) or ''
    posting_cache[key] = v
  end
  return v
end

local function set_postings(key, v)
  posting_cache[key] = v
  dirty_postings[key] = true
end

-- Where `cell` is in list `v` (a multiple of 8 bytes), or nil.
local function find_cell(v, cell)
  local at = string.find(v, cell, 1, true)
  while at and at % 8 ~= 1 do
    at = string.find(v, cell, at + 1, true)
  end
  return at
end

local function entry(slot)
  local e = entry_cache[slot]
  if e == nil then
    e = redis.call('GET', ENTRY .. slot)
    entry_cache[slot] = e
  end
  return e
end

-- seq, number of keys, number of shingles, whether the text was cut
local function header(e)
  local hi, lo, nk, ns = struct.unpack('>I4I4BI4', e)
  -- The key count's high bit says the text was cut.
  local cut = nk >= 128
  if cut then
    nk = nk - 128
  end
  return hi * TWO32 + lo, nk, ns, cut
end

local formats = {}
local function numbers(s, pos, n)
  local out, k = {}, 0
  while n > 0 do
    local c = n > 128 and 128 or n
    local f = formats[c]
    if not f then
      f = '>' .. string.rep('I4', c)
      formats[c] = f
    end
    local values = {struct.unpack(f, s, pos)}
    for v = 1, c do
      out[k + v] = values[v]
    end
    k, n, pos = k + c, n - c, pos + 4 * c
  end
  return out
end

-- The candidate in `slot`: its arrival number and sorted shingle set.
local function parsed(slot)
  local c = parsed_cache[slot]
  if c == nil then
    local e = entry(slot)
    if not e then
      return nil
    end
    local s, nk, ns, cut = header(e)
    local anchors = {}
    for r = bands + 1, nk - 1 do
      anchors[#anchors + 1] = string.sub(e, 10 + 4 * r, 13 + 4 * r)
    end
    c = {seq = s, set = numbers(e, 14 + 4 * nk, ns), anchors = anchors, cut = cut}
    parsed_cache[slot] = c
  end
  return c
end

local function shared_count(a, b)
  local x, y, na, nb, shared = 1, 1, #a, #b, 0
  while x <= na and y <= nb do
    local u, v = a[x], b[y]
    if u == v then
      shared, x, y = shared + 1, x + 1, y + 1
    elseif u < v then
      x = x + 1
    else
      y = y + 1
    end
  end
  return shared
end

-- The posting keys of a message, split out of its argument.
local function split_keys(keys)
  local out = {}
  for at = 1, #keys, 4 do
    out[#out + 1] = string.sub(keys, at, at + 3)
  end
  return out
end

-- Marks `slot` as just used.
local renewed = {}
local function touch(slot)
  stamp = stamp + 1
  pending_stamps[#pending_stamps + 1] = int(stamp)
  pending_stamps[#pending_stamps + 1] = slot
  renewed[slot] = true
end

local function flush_stamps()
  chunked('ZADD', LRU, pending_stamps, 2)
  pending_stamps = {}
end

-- The least recently used messages, read a page at a time with their
-- entries and lists. A page stays in order while this call runs, but for
-- the messages it refreshes or reinserts (they have moved to the end),
-- which are passed over; the next page is read after the call's recency
-- changes are written, so it is in order too.
local victims, next_at = {}, 1
local function next_victim()
  while true do
    local slot = victims[next_at]
    if slot == nil then
      flush_stamps()
      renewed = {}
      victims = redis.call('ZRANGE', LRU, 0, 63)
      next_at = 1
      local missing = {}
      for _, s in ipairs(victims) do
        if entry_cache[s] == nil then
          missing[#missing + 1] = ENTRY .. s
        end
      end
      if #missing > 0 then
        local got = redis.call('MGET', unpack(missing))
        local k = 0
        for _, s in ipairs(victims) do
          if entry_cache[s] == nil then
            k = k + 1
            entry_cache[s] = got[k]
          end
        end
      end
      local keys = {}
      for _, s in ipairs(victims) do
        local e = entry_cache[s]
        local _, nk = header(e)
        for r = 0, nk - 1 do
          keys[#keys + 1] = string.sub(e, 14 + 4 * r, 17 + 4 * r)
        end
      end
      load_postings(keys)
      slot = victims[1]
    end
    next_at = next_at + 1
    -- (An expired slot left the recency order after the page was read.)
    if not renewed[slot] and entry(slot) then
      return slot
    end
  end
end

-- Removes every posting of the message in `slot`.
local function drop_postings(slot)
  local e = entry(slot)
  local _, nk = header(e)
  local cell = slot .. string.sub(e, 5, 8)
  for r = 0, nk - 1 do
    local key = string.sub(e, 14 + 4 * r, 17 + 4 * r)
    local v = postings(key)
    local at = find_cell(v, cell)
    if at then
      set_postings(key, string.sub(v, 1, at - 1) .. string.sub(v, at + 8))
    end
  end
end

-- Under a window: evicts every message whose time is before `horizon`
-- (engine/window.rs, index.rs `expire`), with its postings, entry and
-- recency; its slot goes on the free list.
local expired_to = nil
local function expire(horizon)
  if expired_to and horizon <= expired_to then
    return
  end
  expired_to = horizon
  local old = redis.call('ZRANGEBYSCORE', TIMES, '-inf', '(' .. int(horizon))
  if #old == 0 then
    return
  end
  -- A stamp still to be written must not bring an expired slot back.
  flush_stamps()
  for _, slot in ipairs(old) do
    drop_postings(slot)
    entry_cache[slot] = false
    dirty_entries[slot] = true
    parsed_cache[slot] = nil
    len = len - 1
    evictions = evictions + 1
  end
  chunked('ZREM', LRU, old, 1)
  chunked('ZREM', TIMES, old, 1)
  chunked('LPUSH', FREE, old, 1)
end

-- Under a window: an exact copy renews the time of the message that
-- stands for it, if its own is later.
local function renew(slot, time)
  local was = tonumber(redis.call('ZSCORE', TIMES, slot))
  if was and time > was then
    redis.call('ZADD', TIMES, int(time), slot)
  end
end

local function insert(keys, ks, shingles, ns, id, cluster, time)
  local slot
  if len >= capacity then
    -- The least recently used message gives up its slot and every posting.
    slot = next_victim()
    drop_postings(slot)
    evictions = evictions + 1
  else
    slot = window and redis.call('RPOP', FREE)
    if not slot then
      slot = struct.pack('>I4', slots)
      slots = slots + 1
    end
    len = len + 1
  end
  if window then
    redis.call('ZADD', TIMES, int(time), slot)
  end
  touch(slot)
  local lo = seq % TWO32
  local e = struct.pack('>I4I4BI4', math.floor(seq / TWO32), lo, #ks + (my_cut and 128 or 0), ns)
    .. keys .. shingles .. struct.pack('>I4', #id) .. id .. cluster
  entry_cache[slot] = e
  dirty_entries[slot] = true
  parsed_cache[slot] = nil
  local cell = slot .. struct.pack('>I4', lo)
  for _, key in ipairs(ks) do
    local v = postings(key)
    if #v < 8 * max_bucket then
      set_postings(key, v .. cell)
    end
  end
end

-- Whether the message a cell names (slot, low seq bits) is still indexed.
local function indexed(cell)
  local e = entry(string.sub(cell, 1, 4))
  return e and string.sub(e, 5, 8) == string.sub(cell, 5, 8)
end

-- The fingerprints of a sorted set up to `bound`.
local function cut(set, bound)
  if #set == 0 or set[#set] <= bound then
    return set
  end
  local out = {}
  for i = 1, #set do
    local v = set[i]
    if v > bound then
      break
    end
    out[i] = v
  end
  return out
end

-- The parts of two sets that can be compared (shingle.rs, `comparable`): a
-- set cut to its smallest `max_shingles` fingerprints holds all of its
-- text's up to its largest, so both are cut at the smaller such bound.
local function comparable(a, b)
  local ba = #a >= max_shingles and a[#a] or nil
  local bb = #b >= max_shingles and b[#b] or nil
  if not ba and not bb then
    return a, b
  end
  local bound = ba or bb
  if ba and bb then
    bound = math.min(ba, bb)
  end
  return cut(a, bound), cut(b, bound)
end

-- The id and the cluster stored in an entry.
local function id_of(slot)
  local e = entry(slot)
  local _, nk, ens = header(e)
  local at = 14 + 4 * nk + 4 * ens
  local idlen = struct.unpack('>I4', e, at)
  local id = string.sub(e, at + 4, at + 3 + idlen)
  local cluster = string.sub(e, at + 4 + idlen)
  if cluster == '' then
    cluster = id
  end
  return id, cluster
end

-- Whether the message's anchor `i` is a copy's: the messages on its list
-- span at most `max_anchor_clusters` clusters (engine::Index::
-- anchor_is_a_copys). Found out once per message, when first needed.
local function anchor_specific(i)
  local known = my_specific[i]
  if known ~= nil then
    return known
  end
  known = true
  local seen, n = {}, 0
  local list = postings(my_anchors[i])
  for at = 1, #list, 8 do
    local slot = string.sub(list, at, at + 3)
    if entry(slot) then
      local _, cluster = id_of(slot)
      if not seen[cluster] then
        if n == max_anchor_clusters then
          known = false
          break
        end
        seen[cluster] = true
        n = n + 1
      end
    end
  end
  my_specific[i] = known
  return known
end

-- The shared shingles of a message and the candidate in `slot`, and what
-- they are counted against (see verdict.rs), and the candidate's seq; nil
-- when the parts that can be compared are empty (no candidate).
local function compare(mine, slot)
  local c = parsed(slot)
  local a, b = comparable(mine, c.set)
  local ns, nc = #a, #b
  if ns == 0 or nc == 0 then
    return nil
  end
  local shared = shared_count(a, b)
  local smaller = ns < nc and ns or nc
  local larger = ns < nc and nc or ns
  -- engine::share_anchor: a shared anchor that is a copy's; the short
  -- anchor (a message's first, when it has any) only for a cut text.
  local anchored = false
  for i, mine_key in ipairs(my_anchors) do
    if i > 1 or my_cut then
      for _, key in ipairs(c.anchors) do
        if mine_key == key and not anchored and anchor_specific(i) then
          anchored = true
        end
      end
    end
  end
  -- engine::verdict::by_containment: a later, shorter text must be
  -- anchored or most of the earlier; an earlier, shorter one must not be
  -- cut, and anchored or most of the later.
  local most = smaller * share_den >= larger * share_num
  local rule
  if ns <= nc then
    rule = anchored or most
  else
    rule = not c.cut and (anchored or most)
  end
  if not jaccard and smaller >= min_contained and rule then
    return shared, smaller, c.seq
  end
  return shared, ns + nc - shared, c.seq
end

-- engine::verdict::LoneMatch::could_take: whether a candidate `s` similar,
-- of `nc` shingles, could be a lone recent match of a message of `ns`.
local function could_take(s, ns, nc)
  local smaller = ns < nc and ns or nc
  local larger = ns < nc and nc or ns
  return recent > 0 and s >= lone_bar and smaller >= min_recent and larger <= max_recent
    and smaller * share_den >= larger * share_num
end

-- Whether the message a cell names is indexed with exactly this shingle
-- set (of `ns` shingles): an exact copy.
local function holds_set(cell, shingles, ns)
  local e = entry(string.sub(cell, 1, 4))
  if not e then
    return false
  end
  local _, nk, ens = header(e)
  local from = 14 + 4 * nk
  return ens == ns and string.sub(e, from, from + 4 * ns - 1) == shingles
end

-- What a claim says: the exact copy's cell (or nil), the match's cell (or
-- nil), shared, of, the matched id and cluster, and where its lists begin.
local function claimed(claim)
  local flags, exact, best, num, den, idlen = struct.unpack('>Bc8c8I4I4H', claim)
  if flags % 2 == 0 then
    exact = nil
  end
  if math.floor(flags / 2) % 2 == 0 then
    best = nil
  end
  local clen = struct.unpack('>H', claim, 28 + idlen)
  local from = 30 + idlen
  return exact, best, num, den, string.sub(claim, 28, 27 + idlen),
    string.sub(claim, from, from + clen - 1), from + clen, math.floor(flags / 4) % 8
end

-- Whether a claim leaves the message to this script: no match, but a
-- candidate that could be a lone recent match, and whether it is recent
-- is known only here (flag 32).
local function leaves_it_here(claim)
  return math.floor(string.byte(claim, 1) / 32) % 2 == 1
end

-- A worker's claim (see the top): the exact copy, the match, its shared
-- and of counts and id, as the worker found them. A list the same length
-- and ending in the same cell as the worker read it has not changed (a list
-- loses cells to evictions and gains new ones at its end, and a cell names
-- one message, never seen before). Cells added since are verified here;
-- cells gone matter only if the claimed copy or match is gone. Returns the
-- verdict's parts, or nil when the claim cannot stand (then all is decided
-- here).
local function take_claim(ks, shingles, ns, claim)
  local exact, best, num, den, match_id, match_cluster, pos, copies = claimed(claim)
  local nrec = #ks
  local fresh = {}
  local changed = false
  for r = 1, nrec do
    local v = postings(ks[r])
    local hi, lo = string.byte(claim, pos, pos + 1)
    local n = hi * 256 + lo
    local last = string.sub(claim, pos + 2, pos + 9)
    pos = pos + 10
    if n ~= #v or (n > 0 and string.sub(v, -8) ~= last) then
      if r > bands and r < nrec then
        -- An anchor's list changed: the worker's comparisons stand only if
        -- the anchor is still what it was (a copy's, or a template's).
        local i = r - bands
        local was = math.floor(copies / 2 ^ (i - 1)) % 2 == 1
        if i > 3 or anchor_specific(i) ~= was then
          return nil
        end
      end
      changed = true
      local from = 1
      if n > 0 then
        local at = find_cell(v, last)
        if not at then
          return nil
        end
        from = at + 8
      end
      for at = from, #v, 8 do
        fresh[#fresh + 1] = {r, string.sub(v, at, at + 7)}
      end
    end
  end
  if not changed then
    return exact, best, num, den, match_id, match_cluster
  end
  if (exact and not indexed(exact)) or (best and not indexed(best)) then
    return nil
  end
  local new_exact = nil
  if not exact then
    for _, f in ipairs(fresh) do
      if f[1] == nrec then
        if holds_set(f[2], shingles, ns) then
          exact, new_exact = f[2], f[2]
          break
        end
      end
    end
  end
  if jaccard and exact then
    return exact, exact, 1, 1, id_of(string.sub(exact, 1, 4))
  end
  local mine, best_s, best_seq = nil, nil, nil
  local lone_possible = false
  if best then
    best_s = num / den
  end
  local function consider(cell)
    mine = mine or numbers(shingles, 1, ns)
    local slot = string.sub(cell, 1, 4)
    local shared, of, cseq = compare(mine, slot)
    if not shared then
      return
    end
    local s = shared / of
    if could_take(s, ns, #parsed(slot).set) then
      lone_possible = true
    end
    if s >= (best_s or threshold) then
      if best and not best_seq then
        best_seq = parsed(string.sub(best, 1, 4)).seq
      end
      if best_s == nil or s > best_s or cseq < best_seq then
        best, best_s, best_seq, num, den = cell, s, cseq, shared, of
        match_id, match_cluster = id_of(slot)
      end
    end
  end
  for _, f in ipairs(fresh) do
    if f[1] < nrec then
      consider(f[2])
    end
  end
  if new_exact then
    consider(new_exact)
  end
  if not best and lone_possible then
    return nil
  end
  return exact, best, num, den, match_id, match_cluster
end

-- The whole decision, as the in-memory engine makes it.
local function decide_here(ks, shingles, ns)
  local nrec = #ks
  -- The exact path: an indexed message with this very shingle set.
  local exact
  local v = postings(ks[nrec])
  for at = 1, #v, 8 do
    local cell = string.sub(v, at, at + 7)
    if holds_set(cell, shingles, ns) then
      exact = cell
      break
    end
  end
  if jaccard and exact then
    -- Under Jaccard only an identical set reaches 1: nothing can beat it.
    return exact, exact, 1, 1, id_of(string.sub(exact, 1, 4))
  end
  local best, best_s, best_seq, best_num, best_den
  -- engine::verdict::LoneMatch: the best recent candidate and whether the
  -- candidates near the message span more than one cluster.
  local lone, lone_s, lone_seq, lone_num, lone_den
  local near_cluster, crowded = nil, false
  local mine = numbers(shingles, 1, ns)
  local seen = {}
  local function consider(cell)
    local slot = string.sub(cell, 1, 4)
    if seen[slot] then
      return
    end
    seen[slot] = true
    if not entry(slot) then
      return
    end
    local shared, of, cseq = compare(mine, slot)
    if not shared then
      return
    end
    local s = shared / of
    if recent > 0 and s >= near_bar then
      if not crowded then
        local _, cluster = id_of(slot)
        if near_cluster == nil then
          near_cluster = cluster
        elseif near_cluster ~= cluster then
          crowded = true
        end
      end
      if could_take(s, ns, #parsed(slot).set) and seq - cseq <= recent
        and (lone == nil or s > lone_s or (s == lone_s and cseq < lone_seq)) then
        lone, lone_s, lone_seq, lone_num, lone_den = cell, s, cseq, shared, of
      end
    end
    if s >= (best_s or threshold) and (best_s == nil or s > best_s or cseq < best_seq) then
      best, best_s, best_seq, best_num, best_den = cell, s, cseq, shared, of
    end
  end
  for r = 1, nrec - 1 do
    local list = postings(ks[r])
    for at = 1, #list, 8 do
      consider(string.sub(list, at, at + 7))
    end
  end
  if exact then
    consider(exact)
  end
  if not best and lone and not crowded then
    best, best_num, best_den = lone, lone_num, lone_den
  end
  local match_id, match_cluster = '', ''
  if best then
    match_id, match_cluster = id_of(string.sub(best, 1, 4))
  end
  return exact, best, best_num, best_den, match_id, match_cluster
end

local function decide(op, keys, shingles, id, claim, time)
  -- The window's clock moves with checks only, empty texts included.
  local horizon
  if window and op == 'c' then
    if not newest or time > newest then
      newest = time
    end
    horizon = newest - window
    expire(horizon)
  end
  local ns = #shingles / 4
  if ns == 0 then
    -- Nothing to compare: new, and never a candidate.
    return 'n'
  end
  local ks = split_keys(keys)
  my_anchors = {}
  my_specific = {}
  for r = bands + 1, #ks - 1 do
    my_anchors[#my_anchors + 1] = ks[r]
  end
  local exact, best, num, den, match_id, cluster
  if claim ~= '' and leaves_it_here(claim) then
    claim = ''
  end
  if claim ~= '' and all_fresh then
    local untouched = true
    for _, key in ipairs(ks) do
      if dirty_postings[key] then
        untouched = false
        break
      end
    end
    if untouched then
      exact, best, num, den, match_id, cluster = claimed(claim)
    end
  end
  if claim ~= '' and not match_id then
    exact, best, num, den, match_id, cluster = take_claim(ks, shingles, ns, claim)
    if not match_id then
      claims_refused = claims_refused + 1
    end
  end
  if not match_id then
    exact, best, num, den, match_id, cluster = decide_here(ks, shingles, ns)
  end
  local verdict = 'n'
  if best then
    if op == 'c' then
      touch(string.sub(best, 1, 4))
    end
    verdict = 'd' .. struct.pack('>I4I4I4', num, den, #match_id) .. match_id .. cluster
  else
    -- A new message is its own cluster.
    cluster = ''
  end
  if op == 'c' then
    if exact then
      if window then
        renew(string.sub(exact, 1, 4), time)
      end
    elseif not horizon or time >= horizon then
      -- (A message older than the window is not indexed.)
      insert(keys, ks, shingles, ns, id, cluster, time)
    end
    seq = seq + 1
  end
  return verdict
end

-- Every list the messages will read, in one command.
local wanted = {}
for m = first, #ARGV, 5 do
  local keys = ARGV[m + 1]
  for at = 1, #keys, 4 do
    wanted[#wanted + 1] = string.sub(keys, at, at + 3)
  end
end
load_postings(wanted)

-- Whether every list is as the worker read it: then a claim holds as long
-- as no message before it in this call changed its lists. The lists only
-- lose cells and gain new ones (never seen by the worker), so equal
-- concatenations mean equal lists.
local seen_key, now = {}, {}
for _, key in ipairs(wanted) do
  if not seen_key[key] then
    seen_key[key] = true
    now[#now + 1] = posting_cache[key]
  end
end
all_fresh = snapshot ~= '' and table.concat(now) == snapshot

local reply = {}
local memo_written = false
local memo_fields = {}
for m = first, #ARGV, 5 do
  local op, token = string.sub(ARGV[m], 1, 1), string.sub(ARGV[m], 10)
  -- An upper-case op: the text was cut.
  my_cut = op == 'C' or op == 'Q'
  op = string.lower(op)
  local hi, lo = struct.unpack('>I4I4', ARGV[m], 2)
  local verdict
  if look_up_memo and token ~= '' then
    verdict = redis.call('HGET', memo_key, token) or nil
  end
  if not verdict then
    verdict = decide(op, ARGV[m + 1], ARGV[m + 2], ARGV[m + 3], ARGV[m + 4], hi * TWO32 + lo)
    if has_memo and token ~= '' and op == 'c' then
      memo_fields[#memo_fields + 1] = token
      memo_fields[#memo_fields + 1] = verdict
    end
  end
  reply[#reply + 1] = verdict
end

-- Write what changed.
flush_stamps()
local entries, gone = {}, {}
for slot in pairs(dirty_entries) do
  if entry_cache[slot] then
    entries[#entries + 1] = ENTRY .. slot
    entries[#entries + 1] = entry_cache[slot]
  else
    gone[#gone + 1] = ENTRY .. slot
  end
end
chunked('MSET', nil, entries, 2)
chunked('DEL', nil, gone, 1)
local lists, emptied = {}, {}
for key in pairs(dirty_postings) do
  local v = posting_cache[key]
  if v == '' then
    emptied[#emptied + 1] = key
  else
    lists[#lists + 1] = key
    lists[#lists + 1] = v
  end
end
chunked('HSET', POSTINGS, lists, 2)
chunked('HDEL', POSTINGS, emptied, 1)
redis.call('HSET', KEYS[1], 'seq', int(seq), 'len', int(len), 'stamp', int(stamp),
  'evictions', int(evictions), 'slots', int(slots))
if newest then
  redis.call('HSET', KEYS[1], 'newest', int(newest))
end
reply[#reply + 1] = len
reply[#reply + 1] = evictions
reply[#reply + 1] = claims_refused
if #memo_fields > 0 then
  chunked('HSET', memo_key, memo_fields, 2)
  memo_written = true
end
if has_memo and call_token ~= '' then
  redis.call('HSET', memo_key, call_token, cmsgpack.pack(reply))
  memo_written = true
end
if memo_written then
  -- Tokens of a worker that died before forgetting them go in a day.
  redis.call('PEXPIRE', memo_key, 86400000)
end
return reply
