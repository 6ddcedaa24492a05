// cafleet WebUI: fleet picker, roster, live timeline, inbox and the Director's composer
// (member screens, the graph and attention are in fleetview.js, loaded first).
// Plain DOM code, no framework, no build step. Message bodies and every other value from
// the database are inserted with textContent only, never parsed as HTML.
"use strict";

const $ = (id) => document.getElementById(id);

const state = {
  fleetId: null,
  fleet: null,
  members: [],          // active roster, as GET /api/fleets/ID returns it
  usage: null,          // GET /api/fleets/ID/usage: spend per member and for the fleet
  keeper: null,         // GET /api/fleets/ID's keeper: running, pid, since (with the fleet's id)
  rosterAt: 0,          // performance.now() when idle_seconds were read
  messages: new Map(),  // message_id -> timeline record
  nextBefore: null,     // id to page below, or null when the oldest message is shown
  pagedOlder: false,    // "load older" was used: a reload must not forget those pages
  selected: null,       // member id whose inbox is shown
  source: null,         // EventSource
  generation: 0,        // bumps on fleet switch; stale responses are dropped
};

// --- helpers ------------------------------------------------------------------------


function parseTime(ts) {
  // Stored timestamps have microseconds; Date parses milliseconds reliably.
  return ts ? new Date(ts.replace(/(\.\d{3})\d+/, "$1")) : null;
}

function formatTime(ts) {
  const date = parseTime(ts);
  if (!date || isNaN(date)) return ts || "";
  const sameDay = date.toDateString() === new Date().toDateString();
  const clock = date.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit", hour12: false });
  return sameDay ? clock : `${date.toLocaleDateString()} ${clock}`;
}

function timeNode(ts, prefix) {
  const node = el("time", null, (prefix || "") + formatTime(ts));
  node.dateTime = ts || "";
  node.title = ts || "";
  return node;
}

function formatIdle(seconds) {
  if (seconds === null || seconds === undefined) return "—";
  if (seconds < 60) return `${seconds}s`;
  if (seconds < 3600) return `${Math.floor(seconds / 60)}m ${seconds % 60}s`;
  if (seconds < 86400) return `${Math.floor(seconds / 3600)}h ${Math.floor((seconds % 3600) / 60)}m`;
  return `${Math.floor(seconds / 86400)}d ${Math.floor((seconds % 86400) / 3600)}h`;
}

function memberName(id) {
  const member = state.members.find((m) => m.member_id === id);
  if (member) return member.name;
  if (state.fleet && state.fleet.director_member_id === id) return "Director";
  return "member";
}

function directorId() {
  return state.fleet ? state.fleet.director_member_id : null;
}

function setLive(kind, label) {
  $("live").dataset.state = kind;
  $("live").textContent = label;
}

// --- fleets -------------------------------------------------------------------------

function fleetFromHash() {
  const match = /^#fleet=(\d+)$/.exec(location.hash);
  return match ? Number(match[1]) : null;
}

async function loadFleets() {
  const fleets = await api("/api/fleets");
  const picker = $("fleet-picker");
  const wanted = state.fleetId ?? fleetFromHash();
  picker.replaceChildren();
  for (const fleet of fleets) {
    const option = el("option", null, fleetLabel(fleet));
    option.value = String(fleet.fleet_id);
    picker.append(option);
  }
  if (wanted !== null && !fleets.some((f) => f.fleet_id === wanted)) {
    const option = el("option", null, `fleet #${wanted}`);  // a deleted fleet stays viewable
    option.value = String(wanted);
    picker.append(option);
  }
  picker.disabled = picker.options.length === 0;
  if (picker.options.length === 0) {
    showBanner("No fleets yet. Run `cafleet fleet create --name NAME --coding-agent AGENT` inside a tmux or herdr pane.");
    return;
  }
  const choice = wanted ?? Number(picker.options[0].value);
  picker.value = String(choice);
  if (choice !== state.fleetId) selectFleet(choice);
}

function fleetLabel(fleet) {
  const size = fleet.deleted_at ? "deleted" : `${fleet.active_members} active`;
  return `${fleet.name || "(unnamed)"} · #${fleet.fleet_id} · ${size}`;
}

function selectFleet(fleetId) {
  state.generation += 1;
  state.fleetId = fleetId;
  state.fleet = null;
  state.members = [];
  state.messages.clear();
  state.nextBefore = null;
  state.pagedOlder = false;
  state.selected = null;
  history.replaceState(null, "", `#fleet=${fleetId}`);
  $("timeline").replaceChildren();
  renderInbox(null, []);
  FleetView.reset(fleetId);
  connect();
}

function connect() {
  if (state.source) state.source.close();
  setLive("reconnecting", "connecting…");
  const source = new EventSource(`/api/events?fleet_id=${state.fleetId}`);
  state.source = source;
  const generation = state.generation;
  // The server snapshots the fleet before the stream opens, so loading after "open"
  // misses nothing: later changes arrive as events and are merged by message id.
  source.addEventListener("open", () => {
    setLive("live", "live");
    reload(generation).catch((error) => showBanner(`Could not load fleet ${state.fleetId}: ${error.message}`));
  });
  source.addEventListener("error", () => {
    if (source.readyState === EventSource.CLOSED) {
      setLive("off", "offline");
      fetch(`/api/fleets/${state.fleetId}`).then(async (response) => {
        if (response.status === 404) showBanner(`Fleet ${state.fleetId} does not exist.`);
        else setTimeout(() => { if (state.source === source) connect(); }, 3000);
      }).catch(() => setTimeout(() => { if (state.source === source) connect(); }, 3000));
    } else {
      setLive("reconnecting", "reconnecting…");
    }
  });
  for (const kind of ["message", "ack", "notified"]) {
    source.addEventListener(kind, (event) => onMessageEvent(kind, JSON.parse(event.data)));
  }
  source.addEventListener("roster", (event) => applyFleet(JSON.parse(event.data)));
  // The server ends the stream after a database error; the browser reconnects by itself.
  source.addEventListener("failure", (event) => showBanner(JSON.parse(event.data).error));
}

async function reload(generation) {
  const [detail, page] = await Promise.all([
    api(`/api/fleets/${state.fleetId}`),
    api(`/api/fleets/${state.fleetId}/messages?limit=50`),
  ]);
  if (generation !== state.generation) return;
  applyFleet(detail);
  for (const record of page.messages) upsertMessage(record, false);
  if (!state.pagedOlder) state.nextBefore = page.next_before;
  renderTimelineMeta();
  FleetView.messagesChanged();
  if (state.selected !== null) refreshInbox();
}

// --- roster -------------------------------------------------------------------------

// The fleet keeper (docs/delivery.md), as GET /api/fleets/ID and the event stream's roster
// updates report it: running, stalled (it holds its lock but wrote no heartbeat for
// CAFLEET_KEEPER_STALLED_AFTER s: stopped or hung) or not running.
function keeperText(fleet) {
  const keeper = state.keeper;
  if (!keeper || keeper.fleetId !== fleet.fleet_id || fleet.deleted_at) return "";
  const pid = keeper.pid !== null && keeper.pid !== undefined ? ` (pid ${keeper.pid})` : "";
  if (keeper.running) {
    const since = keeper.since ? ` since ${formatTime(keeper.since)}` : "";
    return ` · keeper running${pid}${since}`;
  }
  if (keeper.state === "stalled") {
    return ` · keeper stalled${pid}: no heartbeat for ${Math.round(keeper.heartbeat_age)} s (stopped or hung)`;
  }
  return keeper.enabled ? " · keeper not running" : " · keeper off";
}

function applyFleet(detail) {
  state.fleet = detail.fleet;
  state.members = detail.members;
  state.rosterAt = performance.now();
  const fleet = detail.fleet;
  const option = [...$("fleet-picker").options].find((o) => Number(o.value) === fleet.fleet_id);
  if (option) option.textContent = fleetLabel(fleet);
  if (detail.keeper !== undefined) state.keeper = { fleetId: fleet.fleet_id, ...detail.keeper };
  $("fleet-meta").textContent =
    `created ${formatTime(fleet.created_at)} · Director #${fleet.director_member_id}` + keeperText(fleet);
  if (fleet.deleted_at) {
    showBanner(`Fleet ${fleet.fleet_id} was deleted at ${formatTime(fleet.deleted_at)}; its history is read-only.`);
  } else {
    hideBanner();
  }
  renderRoster();
  renderRecipients();
  FleetView.fleet(detail);
  if (!state.usage || state.usage.fleet_id !== fleet.fleet_id) loadSpend();
}

function renderRoster() {
  const body = $("roster").tBodies[0];
  body.replaceChildren();
  for (const member of state.members) {
    const row = el("tr");
    row.dataset.memberId = String(member.member_id);
    if (member.member_id === state.selected) row.classList.add("selected");
    const name = el("td", "name", member.name);
    name.append(el("span", "id", `#${member.member_id}`));
    row.append(
      name,
      el("td", null, member.kind),
      el("td", null, member.status),
      el("td", null, member.backend ?? "—"),
      el("td", null, member.coding_agent ?? "—"),
      el("td", null, member.pane_id ? `${member.window_id ? `${member.window_id} · ` : ""}${member.pane_id}` : "pending"),
      stateCell(member),
      el("td", "idle", ""),
      el("td", "spend", ""),
    );
    row.addEventListener("click", () => selectMember(member.member_id));
    body.append(row);
  }
  $("roster-count").textContent = `(${state.members.length})`;
  tickIdle();
  showSpend();
}

// --- spend (docs/usage.md): GET /api/fleets/ID/usage, refreshed every USAGE_REFRESH_MS ---

const USAGE_REFRESH_MS = 10000;

function spendText(report) {
  if (!report) return "—";
  if (report.no_records) return report.no_records === "no records yet" ? "no records yet" : "—";
  let text = `$${report.usd.toFixed(4)} · ${report.tokens.total} tok`;
  if (report.budget) {
    const caps = [];
    if (report.budget.usd !== null) caps.push(`$${report.budget.usd}`);
    if (report.budget.tokens !== null) caps.push(`${report.budget.tokens} tok`);
    text += ` / ${caps.join(" or ")}${report.budget.over ? " (over)" : ""}`;
  }
  return text;
}

function showSpend() {
  const usage = state.usage;
  if (!usage || !state.fleet || usage.fleet_id !== state.fleet.fleet_id) return;
  for (const row of $("roster").tBodies[0].rows) {
    const report = usage.members.find((m) => m.member_id === Number(row.dataset.memberId));
    const cell = row.querySelector(".spend");
    cell.textContent = spendText(report);
    cell.classList.toggle("over", Boolean(report && report.budget && report.budget.over));
  }
  let total = `fleet spend $${usage.usd.toFixed(4)} · ${usage.tokens.total} tokens`;
  if (usage.budget) total += usage.budget.over ? " (over budget)" : " (budget set)";
  $("roster-spend").textContent = total;
}

async function loadSpend() {
  if (!state.fleet) return;
  try {
    const response = await fetch(`/api/fleets/${state.fleet.fleet_id}/usage`);
    if (response.ok) {
      state.usage = await response.json();
      showSpend();
    }
  } catch (error) {
    // the next refresh tries again
  }
}

function stateCell(member) {
  // alive, idle, silent, blocked, dead, pending, exec (the same states as `cafleet fleet watch`)
  const cell = el("td");
  if (!member.state || member.state === "director") {
    cell.textContent = "—";
    return cell;
  }
  const badge = el("span", `badge state-${member.state}`, member.state);
  badge.title = member.state_detail || "";
  cell.append(badge);
  return cell;
}

function tickIdle() {
  const elapsed = Math.floor((performance.now() - state.rosterAt) / 1000);
  for (const row of $("roster").tBodies[0].rows) {
    const member = state.members.find((m) => m.member_id === Number(row.dataset.memberId));
    const idle = member && member.idle_seconds !== null ? member.idle_seconds + elapsed : null;
    row.querySelector(".idle").textContent = formatIdle(idle);
  }
}

function renderRecipients() {
  const select = $("compose-to");
  const previous = select.value;
  select.replaceChildren();
  for (const member of state.members) {
    if (member.member_id === directorId()) continue;
    const option = el("option", null, `${member.name} #${member.member_id}`);
    option.value = String(member.member_id);
    select.append(option);
  }
  if ([...select.options].some((o) => o.value === previous)) select.value = previous;
  const closed = !state.fleet || Boolean(state.fleet.deleted_at) || select.options.length === 0;
  $("compose-send").disabled = closed;
  $("compose-text").disabled = closed;
}

// --- timeline -----------------------------------------------------------------------

function onMessageEvent(kind, record) {
  upsertMessage(record, kind === "message");
  renderTimelineMeta();
  FleetView.messagesChanged();
  if (state.selected !== null && record.to_member_id === state.selected) refreshInbox();
}

function upsertMessage(record, fresh) {
  state.messages.set(record.message_id, record);
  const list = $("timeline");
  const node = renderMessage(record, true);
  node.dataset.id = String(record.message_id);
  const existing = list.querySelector(`li[data-id="${record.message_id}"]`);
  if (existing) {
    existing.replaceWith(node);
    return;
  }
  if (fresh) node.classList.add("fresh");
  const after = [...list.children].find((child) => Number(child.dataset.id) < record.message_id);
  list.insertBefore(node, after ?? null);
}

function renderMessage(record, withDelivery) {
  const item = el("li", "msg");
  item.dataset.state = record.status_state;
  const head = el("div", "msg-head");
  const route = el("span", "route");
  route.append(
    el("span", "from", memberName(record.from_member_id)),
    el("span", "id", `#${record.from_member_id}`),
    el("span", "arrow", "→"),
    el("span", "to", memberName(record.to_member_id)),
    el("span", "id", `#${record.to_member_id}`),
  );
  head.append(el("span", "msg-id", `msg ${record.message_id}`), route, timeNode(record.created_at));
  if (record.notice) {
    // Only cafleet's own notices carry it (its record of them, never the text): a message
    // whose text looks like one has no badge.
    const badge = el("span", "badge notice", `cafleet notice: ${record.kind}`);
    badge.title = `posted by cafleet about ${record.notice.subject}`;
    item.dataset.notice = record.kind;
    head.append(badge);
  }
  if (record.status_state === "completed") {
    const badge = el("span", "badge completed", `acked ${formatTime(record.status_timestamp)}`);
    badge.title = `acknowledged at ${record.status_timestamp}`;
    head.append(badge);
  } else {
    head.append(el("span", "badge pending", "pending"));
  }
  if (withDelivery) {
    head.append(record.notified
      ? el("span", "badge notified", "notified")
      : el("span", "badge not-notified", "not notified"));
  }
  item.append(head, el("pre", "msg-body", record.text));
  return item;
}

function renderTimelineMeta() {
  $("timeline-count").textContent = `(${state.messages.size}${state.nextBefore !== null ? "+" : ""})`;
  $("timeline-empty").hidden = state.messages.size > 0;
  $("older").hidden = state.nextBefore === null;
}

async function loadOlder() {
  const generation = state.generation;
  const page = await api(`/api/fleets/${state.fleetId}/messages?limit=50&before=${state.nextBefore}`);
  if (generation !== state.generation) return;
  for (const record of page.messages) upsertMessage(record, false);
  state.nextBefore = page.next_before;
  state.pagedOlder = true;
  renderTimelineMeta();
}

// --- inbox --------------------------------------------------------------------------

function selectMember(memberId) {
  state.selected = memberId;
  for (const row of $("roster").tBodies[0].rows) {
    row.classList.toggle("selected", Number(row.dataset.memberId) === memberId);
  }
  if (memberId !== directorId() && [...$("compose-to").options].some((o) => Number(o.value) === memberId)) {
    $("compose-to").value = String(memberId);
  }
  refreshInbox();
}

async function refreshInbox() {
  const memberId = state.selected;
  const generation = state.generation;
  try {
    const inbox = await api(`/api/members/${memberId}/inbox?fleet_id=${state.fleetId}`);
    if (generation !== state.generation || memberId !== state.selected) return;
    renderInbox(inbox.member, inbox.messages);
  } catch (error) {
    if (memberId === state.selected) $("inbox-empty").textContent = `Could not load the inbox: ${error.message}`;
  }
  refreshWorktree(memberId, generation);
}

// The selected member's worktree and its diff against its base, read-only (docs/worktrees.md).
async function refreshWorktree(memberId, generation) {
  const panel = $("worktree");
  try {
    const found = await api(`/api/members/${memberId}/diff?fleet_id=${state.fleetId}`);
    if (generation !== state.generation || memberId !== state.selected) return;
    const tree = found.worktree;
    panel.hidden = !tree;
    if (!tree) return;
    $("worktree-title").textContent = `Worktree ${tree.path} (branch ${tree.branch} from ${tree.base}, ${tree.status})`;
    const note = found.error || (found.diff === "" ? "No changes against its base." : "")
      + (found.truncated ? " The diff is cut short here: `cafleet member diff` prints it whole." : "");
    $("worktree-note").textContent = note;
    $("worktree-diff").textContent = found.diff || "";
  } catch (error) {
    if (memberId === state.selected) {
      panel.hidden = false;
      $("worktree-note").textContent = `Could not load the worktree: ${error.message}`;
    }
  }
}

function renderInbox(member, messages) {
  $("inbox-title").textContent = member ? `Inbox of ${member.name} #${member.member_id}` : "Inbox";
  $("inbox").replaceChildren(...messages.map((record) => renderMessage(record, false)));
  const empty = $("inbox-empty");
  empty.hidden = member !== null && messages.length > 0;
  empty.textContent = member ? "No unacknowledged messages." : "No member selected.";
}

// --- composer -----------------------------------------------------------------------

async function send(event) {
  event.preventDefault();
  const status = $("compose-status");
  const text = $("compose-text").value;
  const to = Number($("compose-to").value);
  if (!text.trim()) {
    status.dataset.kind = "error";
    status.textContent = "Write a message first.";
    return;
  }
  $("compose-send").disabled = true;
  status.dataset.kind = "";
  status.textContent = "sending…";
  try {
    const record = await api("/api/messages", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ from_member_id: directorId(), to_member_id: to, text }),
    });
    upsertMessage(record, true);
    renderTimelineMeta();
    $("compose-text").value = "";
    status.textContent = record.notified
      ? `sent message ${record.message_id}; the member was notified`
      : `sent message ${record.message_id}; not notified${record.warning ? " (" + record.warning + ")" : " (it polls)"}`;
  } catch (error) {
    status.dataset.kind = "error";
    status.textContent = error.message;
  } finally {
    renderRecipients();
  }
}

// --- banner and start-up ------------------------------------------------------------

function showBanner(text) {
  $("banner").textContent = text;
  $("banner").hidden = false;
}

function hideBanner() {
  $("banner").hidden = true;
}

function start() {
  $("fleet-picker").addEventListener("change", (event) => selectFleet(Number(event.target.value)));
  $("composer").addEventListener("submit", send);
  $("compose-text").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) $("composer").requestSubmit();
  });
  $("older").addEventListener("click", () => loadOlder().catch((error) => showBanner(error.message)));
  window.addEventListener("focus", () => loadFleets().catch(() => {}));
  setInterval(tickIdle, 1000);
  setInterval(loadSpend, USAGE_REFRESH_MS);
  loadFleets().catch((error) =>
    showBanner(error.message === LOGIN_NEEDED ? LOGIN_NEEDED : `Could not reach the cafleet server: ${error.message}`));
}

start();
