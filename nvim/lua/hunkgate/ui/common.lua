--- Pieces shared by the review views.
local diff = require('hunkgate.diff')
local nav = require('hunkgate.nav')

local M = {}

M.ns = vim.api.nvim_create_namespace('hunkgate')

---@class hunkgate.Rendered
---@field lines string[]
---@field marks {row: integer, kind: 'add'|'delete'|'noeol'}[] 0-based rows
---@field first_change integer 0-based row of the first added or removed line
---@field parsed hunkgate.ParsedHunk?
---@field numbers {[1]: integer?, [2]: integer?}[] per row: its line in the old and the new file
---@field header string? the hunk's "@@ -a,b +c,d @@" line

--- A hunk as display lines: code without the +/- column (signs and line highlights show the
--- change instead), so the file type's highlighting sees real code.
---@param hunk hunkgate.Hunk
---@return hunkgate.Rendered
function M.render(hunk)
  -- A stale hunk shows its three-way merge with the file: what an accept would land.
  local parsed = nav.is_modifiable(hunk.kind) and diff.parse(nav.shown_diff(hunk)) or nil
  if not parsed then
    -- binary, rename and mode changes are a one-line description, not code.
    local lines = vim.split(vim.trim(hunk.diff or ''), '\n', { plain = true })
    return { lines = lines, marks = {}, first_change = 0, numbers = {} }
  end
  local out = {
    lines = {},
    marks = {},
    first_change = nil,
    parsed = parsed,
    numbers = {},
    header = ('@@ -%d,%d +%d,%d @@'):format(parsed.old_start, parsed.old_len, parsed.new_start, parsed.new_len),
  }
  local old, new = parsed.old_start, parsed.new_start
  for i, l in ipairs(parsed.lines) do
    out.lines[i] = l.text
    out.numbers[i] = { l.kind ~= '+' and old or nil, l.kind ~= '-' and new or nil }
    old = old + (l.kind ~= '+' and 1 or 0)
    new = new + (l.kind ~= '-' and 1 or 0)
    if l.kind ~= ' ' then
      out.marks[#out.marks + 1] = { row = i - 1, kind = l.kind == '+' and 'add' or 'delete' }
      out.first_change = out.first_change or i - 1
    end
    if not l.eol then
      out.marks[#out.marks + 1] = { row = i - 1, kind = 'noeol' }
    end
  end
  if #out.lines == 0 then
    out.lines = { '' }
  end
  out.first_change = out.first_change or 0
  return out
end

--- Put a rendering's signs and highlights on `buf`.
---@param buf integer
---@param r hunkgate.Rendered
---@param ns? integer
function M.decorate(buf, r, ns)
  ns = ns or M.ns
  vim.api.nvim_buf_clear_namespace(buf, ns, 0, -1)
  for _, m in ipairs(r.marks) do
    if m.kind == 'add' then
      vim.api.nvim_buf_set_extmark(buf, ns, m.row, 0, {
        line_hl_group = 'HunkgateAdd',
        sign_text = '+',
        sign_hl_group = 'HunkgateAddSign',
      })
    elseif m.kind == 'delete' then
      vim.api.nvim_buf_set_extmark(buf, ns, m.row, 0, {
        line_hl_group = 'HunkgateDelete',
        sign_text = '-',
        sign_hl_group = 'HunkgateDeleteSign',
      })
    else
      vim.api.nvim_buf_set_extmark(buf, ns, m.row, 0, {
        virt_text = { { ' no newline at end of file', 'HunkgateNoNewline' } },
      })
    end
  end
end

--- Highlight `buf` as the file type of `path`, without setting 'filetype': that would fire
--- FileType autocommands (LSP clients, ftplugins) for a scratch buffer.
---@param buf integer
---@param path string
function M.highlight_as(buf, path)
  local ft = vim.filetype.match({ filename = path }) or ''
  if vim.b[buf].hunkgate_ft == ft then
    return
  end
  vim.b[buf].hunkgate_ft = ft
  pcall(vim.treesitter.stop, buf)
  local lang = ft ~= '' and vim.treesitter.language.get_lang(ft) or nil
  if lang and pcall(vim.treesitter.start, buf, lang) then
    vim.bo[buf].syntax = ''
    return
  end
  vim.bo[buf].syntax = ft
end

--- A scratch buffer.
---@param name string
---@param buftype? string
---@return integer
function M.scratch(name, buftype)
  local buf = vim.api.nvim_create_buf(false, true)
  vim.bo[buf].buftype = buftype or 'nofile'
  vim.bo[buf].bufhidden = 'wipe'
  vim.bo[buf].swapfile = false
  pcall(vim.api.nvim_buf_set_name, buf, name)
  return buf
end

--- Float geometry from the ui options.
---@param ui table
---@param content_height integer
function M.geometry(ui, content_height)
  local cols, rows = vim.o.columns, vim.o.lines - vim.o.cmdheight - 2
  local width = math.max(math.min(40, cols - 2), math.min(cols - 2, math.floor(cols * ui.width)))
  local height = math.max(3, math.min(content_height, math.floor(rows * ui.height), rows - 2))
  local col
  if ui.position == 'left' then
    col = 0
  elseif ui.position == 'center' then
    col = math.floor((cols - width) / 2)
  else
    col = cols - width - 2
  end
  local row = ui.position == 'center' and math.floor((rows - height) / 2) or 1
  return { relative = 'editor', row = row, col = math.max(0, col), width = width, height = height }
end

--- Set buffer-local normal-mode maps; `maps` holds {lhs or false, fn, description, name,
--- help, lines}. An action with `lines` (accept, reject) is mapped in Visual mode too: it gets
--- the selected rows (1-based, first <= last) once Visual mode is left.
---@param buf integer
---@param maps {[1]: string|false, [2]: fun(), [3]: string}[]
function M.map(buf, maps)
  for _, m in ipairs(maps) do
    if m[1] then
      vim.keymap.set('n', m[1], m[2], { buffer = buf, nowait = true, silent = true, desc = 'hunkgate: ' .. m[3] })
    end
    local on_lines = m[6]
    if m[1] and on_lines then
      vim.keymap.set('x', m[1], function()
        local a, b = vim.fn.line('v'), vim.fn.line('.')
        -- Leave Visual mode with `:normal!`, which runs only its own keys: feeding <Esc> with
        -- 'x' would first run whatever the user typed ahead (the reject comment) as commands.
        vim.cmd.normal({ args = { vim.keycode('<Esc>') }, bang = true })
        on_lines(math.min(a, b), math.max(a, b))
      end, { buffer = buf, nowait = true, silent = true, desc = 'hunkgate: ' .. m[3] .. ' the selected lines' })
    end
  end
end

---@param buf integer
---@param maps {[1]: string|false}[]
function M.unmap(buf, maps)
  if not vim.api.nvim_buf_is_valid(buf) then
    return
  end
  for _, m in ipairs(maps) do
    if m[1] then
      pcall(vim.keymap.del, 'n', m[1], { buffer = buf })
    end
    if m[1] and m[6] then
      pcall(vim.keymap.del, 'x', m[1], { buffer = buf })
    end
  end
end

return M
