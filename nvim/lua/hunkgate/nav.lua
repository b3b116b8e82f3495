--- Pure hunk navigation and bookkeeping over a suggestion's hunk list (no I/O).
local M = {}

--- States a decision can still be made on.
---@param state string
function M.is_open(state)
  return state == 'pending' or state == 'conflict'
end

--- States where the hunk's change is in the user's file.
---@param state string
function M.is_applied(state)
  return state == 'accepted' or state == 'modified'
end

--- Kinds whose new side is text the user can edit before accepting.
---@param kind string?
function M.is_modifiable(kind)
  return kind == nil or kind == 'modify' or kind == 'create' or kind == 'delete'
end

--- What a reviewer is told about a hunk beside its state, each word after a space (or ''):
--- DESTRUCTIVE (an accept-all asks before landing it), OVERSIZED (over the hub's hunk size
--- limits and not cut into parts: take it whole or by a line range), REWRITE (one of the hunks
--- of a file the change rewrote).
---@param h {destructive?: boolean, oversized?: boolean, rewrite?: boolean}
---@return string
function M.marks(h)
  local out = ''
  for _, m in ipairs({ { h.destructive, 'DESTRUCTIVE' }, { h.oversized, 'OVERSIZED' }, { h.rewrite, 'REWRITE' } }) do
    if m[1] == true then
      out = out .. ' ' .. m[2]
    end
  end
  return out
end

--- The three-way merge a hunk in conflict carries (an accept found it stale), or nil.
---@param h {state: string, merge?: {outcome: 'clean'|'conflicted', diff: string, merged_against: string}}
function M.merge_of(h)
  if h.state == 'conflict' and type(h.merge) == 'table' and type(h.merge.diff) == 'string' then
    return h.merge
  end
end

--- The diff a hunk shows and a modify edits: its three-way merge with the file as it is now
--- while it is in conflict and has one (what would land), else the agent's hunk.
---@param h {state: string, diff?: string, merge?: table}
---@return string
function M.shown_diff(h)
  local m = M.merge_of(h)
  return m and m.diff or h.diff or ''
end

---@param hunks {id: string}[]
---@param id string?
---@return integer?
function M.index_of(hunks, id)
  for i, h in ipairs(hunks) do
    if h.id == id then
      return i
    end
  end
end

--- Step from `cur` in `dir` (1 or -1), wrapping around; with `open_only`, skip decided hunks.
---@param hunks {state: string}[]
---@param cur integer? nil starts before the first (or after the last, going backwards)
---@param dir 1|-1
---@param opts? {open_only?: boolean, wrap?: boolean}
---@return integer?
function M.step(hunks, cur, dir, opts)
  opts = opts or {}
  local n = #hunks
  if n == 0 then
    return nil
  end
  local wrap = opts.wrap ~= false
  local i = cur or (dir > 0 and 0 or n + 1)
  for _ = 1, n do
    i = i + dir
    if i < 1 or i > n then
      if not wrap then
        return nil
      end
      i = dir > 0 and 1 or n
    end
    if not opts.open_only or M.is_open(hunks[i].state) then
      return i
    end
  end
  return nil
end

--- Where review continues after a decision on `cur`: the rest of its file first (forward,
--- wrapping within the file), then the next open hunk of the other files, searching forward
--- and wrapping; `cur` itself when nothing is left open.
---@param hunks {state: string, file?: string}[]
---@param cur integer
---@return integer index
---@return boolean done no open hunk left
function M.after_decision(hunks, cur)
  local file = hunks[cur] and hunks[cur].file
  local n = #hunks
  for k = 1, n - 1 do
    local i = (cur - 1 + k) % n + 1
    if hunks[i].file == file and M.is_open(hunks[i].state) then
      return i, false
    end
  end
  local nxt = M.step(hunks, cur, 1, { open_only = true })
  if nxt then
    return nxt, false
  end
  return cur, true
end

---@param hunks {state: string}[]
---@return table<string, integer> count by state, plus `open` and `total`
function M.counts(hunks)
  local c = { open = 0, total = #hunks }
  for _, h in ipairs(hunks) do
    c[h.state] = (c[h.state] or 0) + 1
    if M.is_open(h.state) then
      c.open = c.open + 1
    end
  end
  return c
end

--- Files in hunk order, each once.
---@param hunks {file: string}[]
---@return string[]
function M.files(hunks)
  local seen, out = {}, {}
  for _, h in ipairs(hunks) do
    if not seen[h.file] then
      seen[h.file] = true
      out[#out + 1] = h.file
    end
  end
  return out
end

--- The hunk to undo: `cur` when it is decided, else the most recent decision in `history`
--- (hunk ids, oldest first) that is still decided.
---@param hunks {id: string, state: string}[]
---@param cur integer?
---@param history string[]
---@return integer?
function M.undo_target(hunks, cur, history)
  if cur and hunks[cur] and not M.is_open(hunks[cur].state) then
    return cur
  end
  for i = #history, 1, -1 do
    local idx = M.index_of(hunks, history[i])
    if idx and not M.is_open(hunks[idx].state) then
      return idx
    end
  end
end

return M
