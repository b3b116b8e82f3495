--- What the plugin knows about the hub's open suggestions, kept current from events and
--- snapshots. Pure data: callers decide what to redraw, reload or announce from the returned
--- change descriptions.
local nav = require('hunkgate.nav')

---@class hunkgate.Hunk
---@field id string
---@field file string
---@field diff string
---@field kind string
---@field index integer
---@field state 'pending'|'accepted'|'modified'|'rejected'|'conflict'
---@field header? {old_start: integer, old_lines: integer, new_start: integer, new_lines: integer}
---@field applied_diff? string
---@field old_path? string
---@field conflict? string
---@field merge? {outcome: 'clean'|'conflicted', diff: string, merged_against: string} a stale hunk's three-way merge
---@field comment? string
---@field destructive? boolean deletes a file, renames one, changes its mode or deletes many lines
---@field oversized? boolean over the hub's hunk size limits, and not cut into parts
---@field rewrite? boolean one of the hunks of a file the change rewrote
---@field diagnostics? table[] the checkers' new and fixed diagnostics on its lines (|hunkgate-checks|)

---@class hunkgate.Suggestion
---@field id string
---@field description string
---@field files string[]
---@field hunks hunkgate.Hunk[]
---@field hunk_count integer
---@field reviewed_count integer
---@field status string
---@field closed? string
---@field created_at? string
---@field run_id? string
---@field skipped? {path: string, reason: string}[] files the run left out: never hunks, never changed
---@field checks? {state: string, checkers: string[], notes?: string[]} how its checks went
---@field diagnostics? table[] the checkers' diagnostics outside every hunk

--- A question the built-in agent asked (`clarify_user`) and waits on.
---@class hunkgate.Question
---@field run_id string
---@field question_id string
---@field question string
---@field order integer when it became known here (for oldest first)

---@class hunkgate.Change
---@field kind 'ready'|'hunk'|'checked'|'completed'|'status'|'error'|'tool'|'question'|'answered'|'ignored'
---@field suggestion_id? string
---@field run_id? string
---@field question_id? string
---@field file? string
---@field file_changed? boolean the decision wrote to the user's file
---@field new? boolean first time this suggestion (or question) is seen

---@class hunkgate.Store
---@field suggestions table<string, hunkgate.Suggestion>
---@field questions table<string, hunkgate.Question> by run id: a run waits on one at a time
---@field answered table<string, true> ids of questions answered or skipped
---@field known integer questions seen so far (the last one's `order`)
---@field last_status? {message: string, status: string, suggestion_id?: string, run_id?: string}
---@field last_tool? {run_id: string, name: string, ok: boolean, summary: string, duration_ms?: integer}
local Store = {}
Store.__index = Store

local M = {}

---@return hunkgate.Store
function M.new()
  return setmetatable({ suggestions = {}, questions = {}, answered = {}, known = 0 }, Store)
end

---@param s hunkgate.Suggestion
local function recount(s)
  local c = nav.counts(s.hunks)
  s.hunk_count = c.total
  s.reviewed_count = (c.accepted or 0) + (c.modified or 0) + (c.rejected or 0)
  if s.closed then
    s.status = 'complete'
  elseif s.reviewed_count == 0 then
    s.status = 'pending'
  elseif s.reviewed_count == s.hunk_count then
    s.status = 'complete'
  else
    s.status = 'partial'
  end
end

---@param id string
---@return hunkgate.Suggestion?
function Store:get(id)
  return self.suggestions[id]
end

--- Find a suggestion by id or unique id prefix.
---@param prefix string
---@return hunkgate.Suggestion?
function Store:find(prefix)
  if self.suggestions[prefix] then
    return self.suggestions[prefix]
  end
  local found
  for id, s in pairs(self.suggestions) do
    if vim.startswith(id, prefix) then
      if found then
        return nil
      end
      found = s
    end
  end
  return found
end

--- Open suggestions, oldest first.
---@return hunkgate.Suggestion[]
function Store:list()
  local out = {}
  for _, s in pairs(self.suggestions) do
    out[#out + 1] = s
  end
  table.sort(out, function(a, b)
    if (a.created_at or '') ~= (b.created_at or '') then
      return (a.created_at or '') < (b.created_at or '')
    end
    return a.id < b.id
  end)
  return out
end

---@return {suggestions: integer, hunks: integer}
function Store:pending()
  local n, hunks = 0, 0
  for _, s in pairs(self.suggestions) do
    local open = nav.counts(s.hunks).open
    if open > 0 then
      n = n + 1
      hunks = hunks + open
    end
  end
  return { suggestions = n, hunks = hunks }
end

--- Add or replace a whole suggestion (a `get` answer or a `suggestion.ready`).
---@param s hunkgate.Suggestion
---@return boolean new
function Store:put(s)
  local new = self.suggestions[s.id] == nil
  if s.closed then
    self.suggestions[s.id] = nil
    return false
  end
  s.hunks = s.hunks or {}
  recount(s)
  self.suggestions[s.id] = s
  return new
end

--- Replace everything with a full resync's result.
---@param list hunkgate.Suggestion[]
---@return string[] new_ids suggestions not known before
function Store:replace(list)
  local before = self.suggestions
  self.suggestions = {}
  local new_ids = {}
  for _, s in ipairs(list) do
    self:put(s)
    if self.suggestions[s.id] and not before[s.id] then
      new_ids[#new_ids + 1] = s.id
    end
  end
  return new_ids
end

--- Questions waiting for an answer, oldest first.
---@return hunkgate.Question[]
function Store:pending_questions()
  local out = vim.tbl_values(self.questions)
  table.sort(out, function(a, b)
    return a.order < b.order
  end)
  return out
end

--- Is `q` still the question its run waits on?
---@param q hunkgate.Question
---@return boolean
function Store:is_pending(q)
  local now = self.questions[q.run_id]
  return now ~= nil and now.question_id == q.question_id
end

---@param run_id string
---@param question_id string
---@param question string
---@return boolean new
function Store:ask(run_id, question_id, question)
  local known = self.questions[run_id]
  if self.answered[question_id] or (known and known.question_id == question_id) then
    return false
  end
  self.known = self.known + 1
  self.questions[run_id] = { run_id = run_id, question_id = question_id, question = question, order = self.known }
  return true
end

--- The question of `run_id` is settled: answered or skipped (with its id), or gone with its run.
---@param run_id string
---@param question_id? string
function Store:drop_question(run_id, question_id)
  if question_id then
    self.answered[question_id] = true
  end
  local q = self.questions[run_id]
  if q and (question_id == nil or q.question_id == question_id) then
    self.questions[run_id] = nil
  end
  local st = self.last_status
  -- "Question: ..." is no news once answered.
  if st and st.status == 'waiting_for_user' and st.run_id == run_id then
    self.last_status = nil
  end
end

--- Replace the questions with the hub's run list (`GET /runs`) after a resync. Questions that
--- became known after `since` (a `known` value taken before asking) are newer than the list and
--- stay; answered ones are not brought back by a list older than the answer.
---@param runs {run_id: string, status: string, question?: {question_id: string, question: string}}[]
---@param since integer
---@return hunkgate.Question[] new questions not known before, oldest first
function Store:replace_questions(runs, since)
  local before = self.questions
  self.questions = {}
  for run_id, q in pairs(before) do
    if q.order > since then
      self.questions[run_id] = q
    end
  end
  local new = {}
  for _, r in ipairs(runs) do
    local q = r.question
    if r.status == 'waiting_for_user' and type(q) == 'table' and q.question_id then
      local old = before[r.run_id]
      if old and old.question_id == q.question_id then
        self.questions[r.run_id] = self.questions[r.run_id] or old
      elseif self:ask(r.run_id, q.question_id, q.question or '') then
        new[#new + 1] = self.questions[r.run_id]
      end
    end
  end
  return new
end

--- Merge one hunk as the hub reports it (a feedback response's `hunk`).
---@param sid string
---@param view hunkgate.Hunk
---@return hunkgate.Change
function Store:update_hunk(sid, view)
  local s = self.suggestions[sid]
  local i = s and nav.index_of(s.hunks, view.id)
  if not s or not i then
    return { kind = 'ignored' }
  end
  local before = s.hunks[i].state
  s.hunks[i] = vim.tbl_extend('force', s.hunks[i], view)
  if view.state ~= 'conflict' then
    s.hunks[i].conflict = view.conflict
  end
  s.hunks[i].merge = view.merge
  -- An undo takes a line-range decision back: no range, nothing applied.
  s.hunks[i].lines = view.lines
  if not nav.is_applied(view.state) then
    s.hunks[i].applied_diff = nil
  end
  recount(s)
  return {
    kind = 'hunk',
    suggestion_id = sid,
    file = s.hunks[i].file,
    file_changed = nav.is_applied(before) ~= nav.is_applied(view.state),
  }
end

--- A decision changed the suggestion's hunk set: take out the hunks it took back and put the
--- ones it added (a line-range decision's rest) right after the hunk it decided. A hunk
--- already there is not added twice (the answer and the event both carry it).
---@param sid string
---@param after_id string the decided hunk
---@param added? hunkgate.Hunk[]
---@param removed? string[]
---@return boolean changed
function Store:reshape(sid, after_id, added, removed)
  local s = self.suggestions[sid]
  if not s then
    return false
  end
  local changed = false
  for _, id in ipairs(removed or {}) do
    local i = nav.index_of(s.hunks, id)
    if i then
      table.remove(s.hunks, i)
      changed = true
    end
  end
  local at = nav.index_of(s.hunks, after_id) or #s.hunks
  for _, h in ipairs(added or {}) do
    if not nav.index_of(s.hunks, h.id) then
      at = at + 1
      table.insert(s.hunks, at, h)
      changed = true
    end
  end
  if changed then
    recount(s)
  end
  return changed
end

--- Apply one hub event.
---@param ev table
---@return hunkgate.Change
function Store:apply(ev)
  local t = ev.type
  if t == 'suggestion.ready' then
    local s = ev.suggestion
    -- A suggestion already known is at least as new as its ready event (replays, resyncs).
    if self.suggestions[s.id] then
      return { kind = 'ready', suggestion_id = s.id, new = false }
    end
    return { kind = 'ready', suggestion_id = s.id, new = self:put(s) }
  elseif t == 'suggestion.hunk_applied' then
    local s = self.suggestions[ev.suggestion_id]
    local i = s and nav.index_of(s.hunks, ev.hunk_id)
    if not s or not i then
      return { kind = 'ignored' }
    end
    local h = s.hunks[i]
    local before = h.state
    h.state = ev.state
    h.conflict = nil
    if not nav.is_applied(ev.state) then
      h.applied_diff = nil
      h.merge = nil
    end
    if ev.lines or ev.removed_hunk_ids then
      h.lines = ev.lines
    end
    self:reshape(s.id, h.id, ev.new_hunks, ev.removed_hunk_ids)
    recount(s)
    return {
      kind = 'hunk',
      suggestion_id = s.id,
      file = h.file,
      file_changed = nav.is_applied(before) ~= nav.is_applied(ev.state),
    }
  elseif t == 'suggestion.checked' then
    local s = self.suggestions[ev.suggestion_id]
    if not s then
      return { kind = 'ignored' }
    end
    -- The event holds every diagnostic, each with its hunk: those on no hunk are the
    -- suggestion's own.
    local on = {}
    s.diagnostics = {}
    for _, d in ipairs(ev.diagnostics or {}) do
      if d.hunk_id then
        on[d.hunk_id] = on[d.hunk_id] or {}
        table.insert(on[d.hunk_id], d)
      else
        table.insert(s.diagnostics, d)
      end
    end
    for _, h in ipairs(s.hunks) do
      h.diagnostics = on[h.id]
    end
    s.checks = ev.checks
    return { kind = 'checked', suggestion_id = s.id }
  elseif t == 'suggestion.completed' then
    local s = self.suggestions[ev.suggestion_id]
    local st = self.last_status
    -- A finished review's progress line ("5/5 hunks reviewed") is no news any more.
    if s and st and (st.suggestion_id == s.id or (st.run_id and st.run_id == s.run_id)) then
      self.last_status = nil
    end
    local known = s ~= nil
    self.suggestions[ev.suggestion_id] = nil
    return { kind = known and 'completed' or 'ignored', suggestion_id = ev.suggestion_id }
  elseif t == 'suggestion.status' then
    local q = ev.run_id and self.questions[ev.run_id]
    -- A run that reports anything but waiting has moved on (cancelled, failed) without an answer.
    if q and ev.status ~= 'waiting_for_user' then
      self.questions[ev.run_id] = nil
    end
    self.last_status = {
      message = ev.message or '',
      status = ev.status or '',
      suggestion_id = ev.suggestion_id,
      run_id = ev.run_id,
    }
    return { kind = 'status', suggestion_id = ev.suggestion_id, run_id = ev.run_id }
  elseif t == 'clarification.requested' then
    local new = self:ask(ev.run_id, ev.question_id, ev.question or '')
    return { kind = 'question', run_id = ev.run_id, question_id = ev.question_id, new = new }
  elseif t == 'clarification.received' then
    self:drop_question(ev.run_id, ev.question_id)
    return { kind = 'answered', run_id = ev.run_id, question_id = ev.question_id }
  elseif t == 'tool.call.completed' then
    self.last_tool = {
      run_id = ev.run_id,
      name = ev.name or '',
      ok = ev.ok == true,
      summary = ev.summary or '',
      duration_ms = ev.duration_ms,
    }
    return { kind = 'tool', run_id = ev.run_id }
  elseif t == 'suggestion.error' then
    if ev.run_id and not ev.suggestion_id then
      -- The run failed: nobody waits for an answer any more.
      self.questions[ev.run_id] = nil
    end
    local s = ev.suggestion_id and self.suggestions[ev.suggestion_id]
    local i = s and ev.hunk_id and nav.index_of(s.hunks, ev.hunk_id)
    if s and i and ev.code == 'apply_failed' then
      s.hunks[i].state = 'conflict'
      s.hunks[i].conflict = ev.message
      s.hunks[i].merge = ev.merge
      recount(s)
    end
    return { kind = 'error', suggestion_id = ev.suggestion_id, file = s and i and s.hunks[i].file or nil }
  end
  return { kind = 'ignored' }
end

return M
