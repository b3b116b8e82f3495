--- The review session: which suggestion and hunk are current, the decisions on them, and the
--- view (floating or inline) that shows them. Hunks come from, and decisions go to, a source
--- (hunkgate.source): the hub unless `set_source` gave another.
local actions = require('hunkgate.actions')
local buffers = require('hunkgate.buffers')
local config = require('hunkgate.config')
local diff = require('hunkgate.diff')
local nav = require('hunkgate.nav')
local notify = require('hunkgate.notify')
local visible = require('hunkgate.visible')

local M = {}

---@type hunkgate.Source?
local source = nil

-- Changes that leave every suggestion as it was.
local agent_news = { status = true, tool = true, question = true, answered = true }

--- Keep the view in step with the source, whoever made the change.
---@param change hunkgate.Change
local function on_change(change)
  local sess = M.session
  if not sess then
    return
  end
  if not source:get(sess.sid) then
    sess.view:close()
    if sess.edit_buf and vim.api.nvim_buf_is_valid(sess.edit_buf) then
      vim.api.nvim_buf_delete(sess.edit_buf, { force = true })
    end
    M.session = nil
    return
  end
  if agent_news[change.kind] or (change.suggestion_id and change.suggestion_id ~= sess.sid) then
    return
  end
  -- The inline view lives in the user's windows: redraw it only while the user is in it,
  -- rather than pulling them back to it.
  local here = sess.style ~= 'inline' or vim.api.nvim_get_current_win() == sess.view.win
  if sess.view:is_open() and here then
    M.render()
  end
end

--- Review hunks of `src` from now on (the hub when not called); an open review ends.
---@param new hunkgate.Source
function M.set_source(new)
  if M.session then
    M.session.view:close()
    M.session = nil
  end
  source = new
  new:subscribe(function(change)
    if source == new then
      on_change(change)
    end
  end)
end

--- Whether hunks come from a source other than the hub (a test's, or another plugin's): then
--- opening the review needs no hub.
---@return boolean
function M.has_own_source()
  return source ~= nil and not source.is_hub
end

---@return hunkgate.Source
local function src()
  if not source then
    M.set_source(require('hunkgate.source').hub())
  end
  return assert(source)
end

---@class hunkgate.Session
---@field sid string
---@field hunk_id string?
---@field view hunkgate.FloatView|hunkgate.InlineView
---@field style string
---@field history string[] hunk ids decided in this session, oldest first
---@field busy boolean a request is on its way
---@field queue {[1]: function, [2]: table}[] actions typed while busy
---@field edit_buf integer? the open modify buffer
---@field drafts table<string, string[]> edited versions not accepted yet, by hunk id
---@field origin integer? the window the review was opened from (it follows the hunk)

---@type hunkgate.Session?
M.session = nil

local function warn(msg)
  notify.send('hunkgate: ' .. msg, vim.log.levels.WARN)
end

local unpack = unpack or table.unpack ---@diagnostic disable-line: deprecated

--- Run queued actions until one of them starts a request.
---@param sess hunkgate.Session
local function drain(sess)
  while M.session == sess and not sess.busy and #sess.queue > 0 do
    local nxt = table.remove(sess.queue, 1)
    nxt[1](unpack(nxt[2], 1, nxt[2].n))
  end
end

--- Keys typed while a request is on its way run after its answer, in order, against the
--- state the hub answered with (type-ahead), instead of acting on a stale hunk or being lost.
---@generic F: function
---@param fn F
---@return F
local function serial(fn)
  return function(...)
    local sess = M.session
    if sess and sess.busy then
      table.insert(sess.queue, { fn, { n = select('#', ...), ... } })
      return
    end
    return fn(...)
  end
end

---@param sess hunkgate.Session
local function release(sess)
  sess.busy = false
  drain(sess)
end

--- The session's suggestion, current hunk index and hunk.
---@return hunkgate.Suggestion? s
---@return integer? index
---@return hunkgate.Hunk? hunk
function M.current()
  local sess = M.session
  local s = sess and src():get(sess.sid)
  if not s then
    return nil
  end
  local i = nav.index_of(s.hunks, sess.hunk_id) or (#s.hunks > 0 and 1 or nil)
  return s, i, i and s.hunks[i] or nil
end

--- The review window's keys: every action with a `key` in hunkgate.actions.
local function actions_for(style)
  local km = config.get().keymaps
  return actions.review_maps(style == 'inline' and km.inline or km)
end

--- The lines `h` covers in its file as it is now: the new side once applied, else the old
--- side moved by the hunks of `s` applied above it (an insertion covers the line it goes after).
---@param h hunkgate.Hunk
---@param s? hunkgate.Suggestion
---@return integer first
---@return integer last
function M.hunk_lines(h, s)
  local hd = h.header
  if not hd then
    local p = diff.parse(h.diff or '')
    hd = p and { old_start = p.old_start, old_lines = p.old_len, new_start = p.new_start, new_lines = p.new_len }
  end
  if not hd then
    return 1, 1
  end
  local applied = nav.is_applied(h.state)
  local first = applied and hd.new_start or hd.old_start
  local len = applied and hd.new_lines or hd.old_lines
  if not applied and s then
    local above = {}
    for _, o in ipairs(s.hunks) do
      local p = o.file == h.file and o.id ~= h.id and nav.is_applied(o.state) and diff.parse(o.applied_diff or o.diff or '')
      if p then
        above[#above + 1] = p
      end
    end
    first = first + diff.offset(above, hd.old_start)
  end
  first = math.max(1, first)
  return first, first + math.max(len, 1) - 1
end

--- A plain file window (not a float, not a special buffer), or nil.
---@param win integer?
---@return integer?
local function file_window(win)
  if
    win
    and vim.api.nvim_win_is_valid(win)
    and vim.api.nvim_win_get_config(win).relative == ''
    and vim.bo[vim.api.nvim_win_get_buf(win)].buftype == ''
  then
    return win
  end
end

--- The file of `s` shown in `win`, relative to the checkout, or nil.
---@param s hunkgate.Suggestion
---@param win integer
---@return string?
local function file_in(s, win)
  local name = vim.api.nvim_buf_get_name(vim.api.nvim_win_get_buf(win))
  if name == '' then
    return nil
  end
  local path = vim.fs.normalize(vim.uv.fs_realpath(name) or name)
  for _, h in ipairs(s.hunks) do
    if vim.fs.normalize(src():root() .. '/' .. h.file) == path then
      return h.file
    end
  end
end

--- Where a review opened from `win` starts: the open hunk under or after the cursor in its
--- file, else that file's first open hunk; nil when the file has none.
---@param s hunkgate.Suggestion
---@param win integer?
---@return integer? index
local function cursor_hunk(s, win)
  win = file_window(win)
  local file = win and file_in(s, win)
  if not win or not file then
    return nil
  end
  local line = vim.api.nvim_win_get_cursor(win)[1]
  local first_in_file
  for i, h in ipairs(s.hunks) do
    if h.file == file and nav.is_open(h.state) then
      first_in_file = first_in_file or i
      local _, last = M.hunk_lines(h, s)
      if last >= line then
        return i
      end
    end
  end
  return first_in_file
end

--- Show the hunk's file at the hunk in `win`, leaving the focus where it is.
---@param win integer
---@param s hunkgate.Suggestion
---@param h hunkgate.Hunk
local function show_in(win, s, h)
  local path = src():root() .. '/' .. h.file
  if not vim.uv.fs_stat(path) then
    return -- a file the hunk would create: nothing to show yet
  end
  local buf = vim.fn.bufadd(path)
  if vim.api.nvim_win_get_buf(win) ~= buf then
    vim.fn.bufload(buf)
    vim.bo[buf].buflisted = true
    if not pcall(vim.api.nvim_win_set_buf, win, buf) then
      return
    end
  end
  local first = M.hunk_lines(h, s)
  pcall(vim.api.nvim_win_set_cursor, win, { math.min(first, vim.api.nvim_buf_line_count(buf)), 0 })
  vim.api.nvim_win_call(win, function()
    vim.cmd('normal! zz')
  end)
end

--- Redraw the view for the current hunk (opening it if needed).
function M.render()
  local s, i, h = M.current()
  local sess = M.session
  if not sess or not s or not i or not h then
    return
  end
  sess.hunk_id = h.id
  local root = src():root()
  sess.view:show({
    suggestion = s,
    index = i,
    hunk = h,
    path = root .. '/' .. h.file,
    root = root,
    done = nav.counts(s.hunks).open == 0,
    maps = actions_for(sess.style),
  })
  -- The floating review covers part of the screen: the window beneath follows the hunk.
  local win = file_window(sess.origin)
  if sess.style ~= 'inline' and config.get().ui.follow and win then
    show_in(win, s, h)
  end
end

--- Pick a suggestion to review: the given id (or prefix), the session's, else the newest one
--- with hunks left to decide.
---@param id string?
---@return hunkgate.Suggestion?
local function pick(id)
  if id and id ~= '' then
    return src():find(id)
  end
  -- Resumed only when among the suggestions the source offers now (the current repository's).
  if M.session and src():find(M.session.sid) then
    return src():find(M.session.sid)
  end
  local list = src():list()
  for i = #list, 1, -1 do
    if nav.counts(list[i].hunks).open > 0 then
      return list[i]
    end
  end
  return list[#list]
end

--- Open the review of a suggestion (see `pick`) and show its current hunk.
---@param id string?
function M.open(id)
  local s = pick(id)
  if not s then
    if id and id ~= '' then
      return warn(('no open suggestion %q'):format(id))
    end
    return notify.send(
      src():connected() and 'hunkgate: no suggestions to review' or 'hunkgate: not connected to the hub (:Hunkgate connect)'
    )
  end
  local style = config.get().ui.style
  local from = vim.api.nvim_get_current_win()
  local here = cursor_hunk(s, from)
  if M.session and (M.session.sid ~= s.id or M.session.style ~= style) then
    M.session.view:close()
    M.session = nil
  end
  if not M.session then
    local view = style == 'inline' and require('hunkgate.ui.inline').new(config.get())
      or require('hunkgate.ui.float').new(config.get())
    require('hunkgate.highlights').define()
    local first = here or nav.step(s.hunks, nil, 1, { open_only = true }) or 1
    local skipped = notify.skipped_text(s)
    if skipped then
      notify.send('hunkgate: ' .. skipped, vim.log.levels.WARN)
    end
    M.session = {
      sid = s.id,
      hunk_id = s.hunks[first] and s.hunks[first].id,
      view = view,
      style = style,
      history = {},
      busy = false,
      queue = {},
      drafts = {},
    }
  elseif here then
    M.session.hunk_id = s.hunks[here].id
  end
  M.session.origin = file_window(from) or M.session.origin
  M.render()
  M.session.view:focus()
end

--- Close the review view; the session is kept so reopening resumes at the same hunk.
function M.close()
  local sess = M.session
  if sess then
    sess.view:close()
    if not src():get(sess.sid) then
      M.session = nil
    end
  end
end

--- Show the current hunk (the gitsigns-style name for "open the review here").
function M.preview_hunk()
  M.open()
end

---@param dir 'next'|'prev'|1|-1
M.nav_hunk = serial(function(dir)
  local s, i = M.current()
  if not s then
    return M.open()
  end
  local step = (dir == 'prev' or dir == -1) and -1 or 1
  local j = nav.step(s.hunks, i, step)
  if j then
    M.session.hunk_id = s.hunks[j].id
    M.render()
  end
end)

--- Refuse to write into a file whose buffer has unsaved changes: the hub would write the
--- file under the buffer, and the next :w would silently undo the hunk (or lose the edits).
---@param h hunkgate.Hunk
---@return boolean blocked
local function blocked_by_unsaved(h)
  for _, file in ipairs({ h.file, h.old_path }) do
    if buffers.dirty(src():root() .. '/' .. file) then
      warn(('%s has unsaved changes; save or discard them first (the hunk stays %s)'):format(file, h.state))
      return true
    end
  end
  return false
end

--- Send one decision and follow up: merge the answer, remember it, move on.
---@param s hunkgate.Suggestion
---@param h hunkgate.Hunk
---@param fields table action, modifiedDiff, comment
---@param opts? {advance?: boolean, done?: fun(ok: boolean)}
local function decide(s, h, fields, opts)
  opts = opts or {}
  local sess = assert(M.session)
  if sess.busy then
    table.insert(sess.queue, { decide, { n = 4, s, h, fields, opts } })
    return
  end
  sess.busy = true
  local function answered(resp)
    if resp.success then
      if fields.action ~= 'undo' then
        table.insert(sess.history, h.id)
      end
      local cur = src():get(s.id)
      if M.session == sess and cur then
        if opts.advance ~= false then
          local j = nav.after_decision(cur.hunks, nav.index_of(cur.hunks, h.id) or 1)
          sess.hunk_id = cur.hunks[j].id
        end
        M.render()
      end
    elseif resp.code == 'conflict' then
      -- The hub also broadcasts it as suggestion.error, which is notified unless turned off.
      if not config.get().notifications.on_error then
        warn(('%s: the hunk does not apply to the file as it is now: %s'):format(h.file, resp.error or ''))
      end
      if M.session == sess then
        M.render()
      end
    else
      warn(('%s failed: %s'):format(fields.action, resp.error or 'unknown error'))
    end
    if opts.done then
      opts.done(resp.success == true)
    end
  end
  src():decide(s.id, h.id, fields, function(resp)
    -- Whatever happens while handling the answer, later keys must not stay queued forever.
    local ok, err = pcall(answered, resp)
    release(sess)
    if not ok then
      error(err, 0)
    end
  end)
end

---@param verb string
---@return hunkgate.Suggestion? s
---@return hunkgate.Hunk? h
local function open_hunk(verb)
  local s, _, h = M.current()
  if not s or not h then
    warn('no review open (:Hunkgate review)')
    return nil
  end
  if not nav.is_open(h.state) then
    local undo = config.get().keymaps.undo
    local hint = undo and (' (' .. undo .. ' undoes it)') or ''
    warn(('cannot %s: the hunk is already %s%s'):format(verb, h.state, hint))
    return nil
  end
  return s, h
end

--- What an accept of `h` sends. A hunk in conflict with a three-way merge (the diff the view
--- shows) names that merge by the file it was computed against: the hub lands exactly it, or,
--- when the file changed since, merges again and answers conflict; a merge with conflict
--- markers is refused as it is (modify resolves it).
---@param h hunkgate.Hunk
local function accept_fields(h)
  local m = nav.merge_of(h)
  if m then
    return { action = 'accept', mergedAgainst = m.merged_against }
  end
  return { action = 'accept' }
end

--- Reject `h` (or the lines of it that `fields.lines` names) with a comment for the agent's
--- next run: `comment` when given, else asked for when `review.reject_comment` is on — empty
--- rejects without one, cancelling keeps the hunk.
---@param s hunkgate.Suggestion
---@param h hunkgate.Hunk
---@param fields table action, lines?
---@param comment? string
local function reject_with_comment(s, h, fields, comment)
  local function send(text)
    text = text and vim.trim(text) or ''
    fields.comment = text ~= '' and text or nil
    decide(s, h, fields)
  end
  if comment ~= nil or not config.get().review.reject_comment then
    return send(comment)
  end
  local sess = M.session
  local what = fields.lines and 'Reject comment for these lines' or 'Reject comment'
  vim.ui.input({ prompt = what .. ' (Enter: none, Esc: keep the hunk): ' }, function(input)
    if M.session ~= sess then
      return
    end
    if input == nil then
      return notify.send(('hunkgate: %s not rejected'):format(h.file))
    end
    send(input)
  end)
end

--- Accept or reject the lines of the current hunk that rows `first`..`last` of the review
--- view show (a Visual selection); the rest of the hunk stays to be decided, as the next hunk.
---@param verb 'accept'|'reject'
---@param first integer
---@param last integer
local function decide_lines(verb, first, last)
  local s, h = open_hunk(verb)
  if not s or not h then
    return
  end
  local range = M.session.view:lines_at(first, last)
  if not range then
    return warn(('the selection holds no line of the hunk; select the lines to %s'):format(verb))
  end
  if verb == 'reject' then
    return reject_with_comment(s, h, { action = 'reject', lines = range })
  end
  if blocked_by_unsaved(h) then
    return
  end
  decide(s, h, { action = 'accept', lines = range })
end

M.accept_lines = serial(function(first, last)
  decide_lines('accept', first, last)
end)

M.reject_lines = serial(function(first, last)
  decide_lines('reject', first, last)
end)

M.accept_hunk = serial(function()
  local s, h = open_hunk('accept')
  if s and h and not blocked_by_unsaved(h) then
    decide(s, h, accept_fields(h))
  end
end)

--- Reject the current hunk, with a comment for the agent's next run (see
--- `reject_with_comment`).
---@param comment? string
M.reject_hunk = serial(function(comment)
  local s, h = open_hunk('reject')
  if s and h then
    reject_with_comment(s, h, { action = 'reject' }, comment)
  end
end)

--- Edit the hunk's new side in a scratch buffer; writing it sends `modify`. A hunk in conflict
--- with a three-way merge is edited as its merge: the markers to resolve, over the file's lines.
M.modify_hunk = serial(function()
  local s, h = open_hunk('modify')
  if not s or not h then
    return
  end
  if not nav.is_modifiable(h.kind) then
    return warn(('a %s change can be accepted or rejected, not modified'):format(h.kind))
  end
  local parsed, err = diff.parse(nav.shown_diff(h))
  if not parsed then
    return warn('cannot read the hunk: ' .. tostring(err))
  end
  local sess = assert(M.session)
  if sess.edit_buf and vim.api.nvim_buf_is_valid(sess.edit_buf) then
    local win = vim.fn.bufwinid(sess.edit_buf)
    if win ~= -1 then
      return vim.api.nvim_set_current_win(win)
    end
  end
  local new_side = diff.side_text(parsed, 'new')
  local buf = require('hunkgate.ui.edit').open({
    name = 'hunkgate://modify/' .. h.id,
    file = h.file,
    -- A version the hub refused (or that was closed with :wq before the answer) comes back.
    lines = sess.drafts[h.id] or new_side,
    -- The hunk's number in the suggestion, as the footer shows it (h.index counts per file).
    title = ('modify %s (hunk %d/%d)'):format(h.file, nav.index_of(s.hunks, h.id) or 0, #s.hunks),
    ui = config.get().ui,
    on_write = function(lines, sent)
      sess.drafts[h.id] = lines
      local function done(ok)
        if ok then
          sess.drafts[h.id] = nil
        end
        sent(ok)
      end
      if #new_side == 0 and #lines == 1 and lines[1] == '' then
        lines = {} -- an empty buffer still has one line
      end
      local what, modified = diff.classify_edit(parsed, lines)
      if what == 'noop' then
        warn('this version changes nothing; reject the hunk instead')
        return done(false)
      end
      if blocked_by_unsaved(h) then
        return done(false)
      end
      if what == 'accept' then
        return decide(s, h, accept_fields(h), { done = done })
      end
      decide(s, h, { action = 'modify', modifiedDiff = diff.format(assert(modified)) }, { done = done })
    end,
    on_close = function()
      sess.edit_buf = nil
      if M.session == sess then
        sess.view:focus()
      end
    end,
  })
  sess.edit_buf = buf
end)

--- Undo the current hunk's decision, or the last one made in this review.
M.undo = serial(function()
  local s, i = M.current()
  if not s then
    return warn('no review open (:Hunkgate review)')
  end
  local j = nav.undo_target(s.hunks, i, M.session.history)
  if not j then
    return warn('nothing to undo')
  end
  local h = s.hunks[j]
  M.session.hunk_id = h.id
  if nav.is_applied(h.state) and blocked_by_unsaved(h) then
    return M.render()
  end
  decide(s, h, { action = 'undo' }, { advance = false })
end)

--- Before an accept-all with destructive hunks among `open` (deletions, renames, mode changes,
--- large deletions), ask whether to land them too (`review.confirm`); `then_(confirm)` goes on,
--- `confirm` true to include them. Without asking, the hub leaves them pending and says so.
---@param open hunkgate.Hunk[]
---@param then_ fun(confirm: boolean)
local function ask_destructive(open, then_)
  local risky = vim.tbl_filter(function(h)
    return h.destructive
  end, open)
  if #risky == 0 or not config.get().review.confirm then
    return then_(false)
  end
  local sess = M.session
  local files = table.concat(vim.tbl_map(function(h)
    return visible.line(h.file)
  end, risky), ', ')
  local choices = { 'all but the destructive ones', 'all, destructive ones too', 'cancel' }
  vim.ui.select(choices, {
    prompt = ('Accept all? %s destructive (%s: deletes, renames, mode or many lines)'):format(
      #risky == 1 and '1 hunk is' or (#risky .. ' hunks are'),
      files
    ),
  }, function(choice)
    if M.session ~= sess or not choice or choice == 'cancel' then
      return
    end
    then_(choice == choices[2])
  end)
end

---@param action 'accept'|'reject'
---@param confirm? boolean accept the destructive hunks too
local function decide_all(action, confirm)
  local s = M.current()
  if not s then
    return warn('no review open (:Hunkgate review)')
  end
  local open = vim.tbl_filter(function(h)
    return nav.is_open(h.state)
  end, s.hunks)
  if #open == 0 then
    return notify.send('hunkgate: no hunks left to decide')
  end
  if action == 'accept' and confirm == nil then
    return ask_destructive(open, function(yes)
      decide_all(action, yes)
    end)
  end
  -- Rejecting a pending hunk never writes, so only accepting has to avoid unsaved buffers.
  local files, skipped = {}, {}
  for _, file in ipairs(nav.files(open)) do
    if action == 'accept' and buffers.dirty(src():root() .. '/' .. file) then
      skipped[#skipped + 1] = file
    else
      files[#files + 1] = file
    end
  end
  if #skipped > 0 then
    warn(('not accepting hunks in %s: unsaved changes; they stay pending'):format(table.concat(skipped, ', ')))
  end
  local calls = #skipped == 0 and { false } or files
  if #calls == 0 then
    return
  end
  local failed = {}
  local left = #calls
  local sess = assert(M.session)
  sess.busy = true
  local left_pending = {}
  for _, file in ipairs(calls) do
    src():decide_all(s.id, action, file or nil, function(resp)
      if not resp.success then
        failed[#failed + 1] = resp.error or 'failed'
      else
        for _, f in ipairs(resp.data and resp.data.failed or {}) do
          failed[#failed + 1] = ('%s: %s'):format(f.hunk_id, f.error)
        end
        for _, k in ipairs(resp.data and resp.data.skipped_destructive or {}) do
          left_pending[#left_pending + 1] = visible.line(k.why or k.hunk_id)
        end
        for _, d in ipairs(resp.data and resp.data.decided or {}) do
          table.insert(sess.history, d.hunk_id)
        end
      end
      left = left - 1
      if left == 0 then
        if #failed > 0 then
          warn(('%s all: %s'):format(action, table.concat(failed, '; ')))
        end
        if #left_pending > 0 then
          warn(('left pending, destructive: %s (accept each by name)'):format(table.concat(left_pending, '; ')))
        end
        if M.session == sess then
          M.render()
        end
        release(sess)
      end
    end, confirm)
  end
end

M.accept_all = serial(function()
  decide_all('accept')
end)

M.reject_all = serial(function()
  decide_all('reject')
end)

---@param action 'finalize'|'discard'
---@param confirmed? boolean
local function finish(action, confirmed)
  local s = M.current()
  if not s then
    return warn('no review open (:Hunkgate review)')
  end
  local open = nav.counts(s.hunks).open
  if open > 0 and not confirmed and config.get().review.confirm then
    local verb = action == 'finalize' and 'Complete' or 'Discard'
    local sess = M.session
    return vim.ui.select({ 'yes', 'no' }, {
      prompt = ('%s the review? %s still pending will count as rejected'):format(
        verb,
        notify.plural(open, 'hunk')
      ),
    }, function(choice)
      if choice == 'yes' and M.session == sess then
        finish(action, true)
      end
    end)
  end
  local sess = assert(M.session)
  sess.busy = true
  src():finish(s.id, action, function(resp)
    if resp.success then
      local d = resp.data or {}
      notify.send(('hunkgate: %s %q: %d of %d hunks applied'):format(
        action == 'finalize' and 'completed' or 'discarded',
        s.description or s.id,
        d.applied_hunks or 0,
        d.hunk_count or #s.hunks
      ))
      -- The source dropped the suggestion, which ended the session: keys typed meanwhile
      -- are dropped rather than run on nothing.
    else
      warn(('%s failed: %s'):format(action == 'finalize' and 'complete' or 'discard', resp.error or ''))
    end
    release(sess)
  end)
end

--- Go to the current hunk in its file: the floating review closes (`keymaps.open_review`
--- there resumes at that hunk), the inline one moves the cursor to it.
function M.jump_to_hunk()
  local sess = M.session
  local s, _, h = M.current()
  if not sess or not s or not h then
    return warn('no review open (:Hunkgate review)')
  end
  local win = file_window(sess.style == 'inline' and sess.view.win or sess.origin)
  if not win then
    for _, w in ipairs(vim.api.nvim_tabpage_list_wins(0)) do
      win = win or file_window(w)
    end
  end
  if not win then
    return warn('no window to show ' .. h.file .. ' in')
  end
  if sess.style ~= 'inline' then
    sess.view:close()
  end
  vim.api.nvim_set_current_win(win)
  local path = src():root() .. '/' .. h.file
  if vim.fs.normalize(vim.api.nvim_buf_get_name(0)) ~= vim.fs.normalize(path) then
    local ok, err = pcall(vim.cmd.edit, vim.fn.fnameescape(path))
    if not ok then
      return warn(tostring(err))
    end
  end
  local first = M.hunk_lines(h, s)
  pcall(vim.api.nvim_win_set_cursor, win, { math.min(first, vim.api.nvim_buf_line_count(0)), 0 })
end

--- Every review key of the current style, with what it does.
function M.help()
  local cfg = config.get()
  local style = M.session and M.session.style or cfg.ui.style
  local lines = {}
  local function add(lhs, desc)
    lines[#lines + 1] = ('%-12s %s'):format(lhs or '(none)', desc)
  end
  add(cfg.keymaps.open_review, 'open or resume the review (global)')
  for _, m in ipairs(actions_for(style)) do
    add(m[1], m[5])
  end
  lines[#lines + 1] = ''
  lines[#lines + 1] = 'All of them: :help hunkgate-review'
  require('hunkgate.ui.panel').show('hunkgate keys', lines)
end

--- Finish the review: what is still pending counts as rejected.
M.complete = serial(function()
  finish('finalize')
end)

--- Abandon the suggestion: pending hunks are rejected, applied ones stay.
M.discard = serial(function()
  finish('discard')
end)

return M
