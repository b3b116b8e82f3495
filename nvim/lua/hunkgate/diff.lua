--- Pure hunk math: parse one unified-diff hunk, rebuild a hunk from an edited new side, find a
--- hunk's old lines in a buffer. No I/O and no editor state, so it is unit-tested directly.
local M = {}

---@class hunkgate.DiffLine
---@field kind ' '|'-'|'+'
---@field text string line content without its terminator (and without a CRLF file's "\r")
---@field eol boolean false when the line is the last of its side and has no newline

---@class hunkgate.ParsedHunk
---@field old_start integer
---@field old_len integer
---@field new_start integer
---@field new_len integer
---@field lines hunkgate.DiffLine[]
---@field crlf boolean some line carried a "\r" before its newline

---@return integer? old_start, integer? old_len, integer? new_start, integer? new_len
function M.parse_header(line)
  local os, ol, ns, nl = line:match('^@@ %-(%d+),?(%d*) %+(%d+),?(%d*) @@')
  if not os then
    return nil
  end
  -- git omits a count of 1 ("@@ -3 +3 @@").
  return tonumber(os), tonumber(ol) or 1, tonumber(ns), tonumber(nl) or 1
end

--- Parse the text of one hunk as the hub sends it (header first, body lines after).
---@param text string
---@return hunkgate.ParsedHunk? hunk
---@return string? err
function M.parse(text)
  local rows = vim.split(text, '\n', { plain = true })
  if rows[#rows] == '' then
    rows[#rows] = nil
  end
  local os, ol, ns, nl
  local first = 1
  while rows[first] and not os do
    os, ol, ns, nl = M.parse_header(rows[first])
    first = first + 1
  end
  if not os then
    return nil, 'no "@@" hunk header'
  end
  ---@type hunkgate.ParsedHunk
  local hunk = { old_start = os, old_len = ol, new_start = ns, new_len = nl, lines = {}, crlf = false }
  local old_n, new_n = 0, 0
  for i = first, #rows do
    local row = rows[i]
    local prefix = row:sub(1, 1)
    if prefix == '\\' then
      local last = hunk.lines[#hunk.lines]
      if not last then
        return nil, ('line %d: "\\ No newline" before any line'):format(i)
      end
      last.eol = false
    elseif prefix == ' ' or prefix == '-' or prefix == '+' or row == '' then
      local body = row:sub(2)
      if body:sub(-1) == '\r' then
        -- CRLF files: "\r" is the line terminator, not content; the hub re-adds it.
        body = body:sub(1, -2)
        hunk.crlf = true
      end
      local kind = prefix == '' and ' ' or prefix --[[@as ' '|'-'|'+']]
      if kind ~= '+' then
        old_n = old_n + 1
      end
      if kind ~= '-' then
        new_n = new_n + 1
      end
      hunk.lines[#hunk.lines + 1] = { kind = kind, text = body, eol = true }
    else
      return nil, ('line %d: unexpected %q'):format(i, row)
    end
  end
  if old_n ~= ol or new_n ~= nl then
    return nil, ('header says -%d +%d lines, body has -%d +%d'):format(ol, nl, old_n, new_n)
  end
  return hunk
end

---@param hunk hunkgate.ParsedHunk
---@param side 'old'|'new'
---@return hunkgate.DiffLine[]
function M.side(hunk, side)
  local skip = side == 'old' and '+' or '-'
  local out = {}
  for _, l in ipairs(hunk.lines) do
    if l.kind ~= skip then
      out[#out + 1] = l
    end
  end
  return out
end

---@param hunk hunkgate.ParsedHunk
---@param side 'old'|'new'
---@return string[]
function M.side_text(hunk, side)
  return vim.tbl_map(function(l)
    return l.text
  end, M.side(hunk, side))
end

local function same(a, b)
  return a.text == b.text and a.eol == b.eol
end

--- The unified text of a hunk: header, body, "\ No newline" markers.
---@param hunk hunkgate.ParsedHunk
---@return string
function M.format(hunk)
  local out = {
    ('@@ -%d,%d +%d,%d @@'):format(hunk.old_start, hunk.old_len, hunk.new_start, hunk.new_len),
  }
  for _, l in ipairs(hunk.lines) do
    out[#out + 1] = l.kind .. l.text
    if not l.eol then
      out[#out + 1] = '\\ No newline at end of file'
    end
  end
  return table.concat(out, '\n') .. '\n'
end

--- Rebuild `hunk` with `edited` as its new side, as a diff the hub accepts for `modify`.
---
--- The old side is kept verbatim (the hub applies a hunk only where its old lines match the
--- file exactly), so the result covers the same old range. Lines the edit kept at either end
--- become context; everything between is one remove block followed by one add block. That is
--- not a minimal diff, but it is exact, and the hub only needs exactness.
---@param hunk hunkgate.ParsedHunk
---@param edited string[] the new side as the user left it (no line terminators)
---@return hunkgate.ParsedHunk
function M.build_modified(hunk, edited)
  local old = M.side(hunk, 'old')
  local orig_new = M.side(hunk, 'new')
  -- Whether the file ends without a newline after this hunk is not the user's edit to make
  -- (the buffer cannot show it), so the new side keeps the agent's choice.
  local new_eol = orig_new[#orig_new] == nil or orig_new[#orig_new].eol
  local new = {}
  for i, text in ipairs(edited) do
    new[i] = { kind = '+', text = (text:gsub('\r', '')), eol = i < #edited or new_eol }
  end
  -- An empty last line without a newline is no line at all: the file ends right after the line
  -- before it (the hub refuses "+" followed by "\ No newline at end of file").
  if #new > 0 and not new[#new].eol and new[#new].text == '' then
    new[#new] = nil
  end

  local prefix = 0
  while prefix < #old and prefix < #new and same(old[prefix + 1], new[prefix + 1]) do
    prefix = prefix + 1
  end
  local suffix = 0
  while
    suffix < #old - prefix
    and suffix < #new - prefix
    and same(old[#old - suffix], new[#new - suffix])
  do
    suffix = suffix + 1
  end

  local lines = {}
  local function add(kind, l)
    lines[#lines + 1] = { kind = kind, text = l.text, eol = l.eol }
  end
  for i = 1, prefix do
    add(' ', old[i])
  end
  for i = prefix + 1, #old - suffix do
    add('-', old[i])
  end
  for i = prefix + 1, #new - suffix do
    add('+', new[i])
  end
  for i = #old - suffix + 1, #old do
    add(' ', old[i])
  end

  -- An empty side's start names the line *before* it (git's convention), so the start moves by
  -- one when a side becomes empty or stops being empty.
  local new_start = hunk.new_start
  if #new == 0 and hunk.new_len > 0 then
    new_start = new_start - 1
  elseif #new > 0 and hunk.new_len == 0 then
    new_start = new_start + 1
  end
  return {
    old_start = hunk.old_start,
    old_len = #old,
    new_start = new_start,
    new_len = #new,
    lines = lines,
    crlf = false,
  }
end

---@param hunk hunkgate.ParsedHunk
---@return boolean
function M.has_changes(hunk)
  for _, l in ipairs(hunk.lines) do
    if l.kind ~= ' ' then
      return true
    end
  end
  return false
end

---@param a string[]
---@param b string[]
local function equal_lists(a, b)
  if #a ~= #b then
    return false
  end
  for i = 1, #a do
    if a[i] ~= b[i] then
      return false
    end
  end
  return true
end

--- What an edit of the new side amounts to: the agent's hunk unchanged, no change at all, or a
--- modified hunk.
---@param hunk hunkgate.ParsedHunk
---@param edited string[]
---@return 'accept'|'noop'|'modify' what
---@return hunkgate.ParsedHunk? modified
function M.classify_edit(hunk, edited)
  if equal_lists(edited, M.side_text(hunk, 'new')) then
    return 'accept'
  end
  local modified = M.build_modified(hunk, edited)
  if not M.has_changes(modified) then
    return 'noop'
  end
  return 'modify', modified
end

--- Where `old` (a hunk's old lines) sits in `lines`: at `expected` (1-based) when it matches
--- there, otherwise at its only occurrence, like the hub decides. Nil when absent or ambiguous.
---@param lines string[]
---@param old string[]
---@param expected integer
---@return integer?
function M.locate(lines, old, expected)
  local function matches_at(at)
    if at < 1 or at + #old - 1 > #lines then
      return false
    end
    for i = 1, #old do
      if lines[at + i - 1] ~= old[i] then
        return false
      end
    end
    return true
  end
  if #old == 0 then
    return math.max(1, math.min(expected, #lines + 1))
  end
  if matches_at(expected) then
    return expected
  end
  local found
  for at = 1, #lines - #old + 1 do
    if matches_at(at) then
      if found then
        return nil
      end
      found = at
    end
  end
  return found
end

--- Net line shift that earlier applied hunks of the same file put above `old_start`.
---@param applied {old_start: integer, old_len: integer, new_len: integer}[]
---@param old_start integer
---@return integer
function M.offset(applied, old_start)
  local shift = 0
  for _, h in ipairs(applied) do
    if h.old_start < old_start then
      shift = shift + h.new_len - h.old_len
    end
  end
  return shift
end

return M
