// cafleet WebUI: member screens, the fleet graph with activity sparklines, and attention.
// Loaded before app.js, which calls FleetView.reset/fleet/messagesChanged.
//
// Pane text is untrusted: it is parsed here into text runs and drawn with textContent,
// colours as CSS classes (or a computed rgb() for 256-colour and true-colour codes). No
// string from a pane, a name or a message ever reaches innerHTML. Every escape sequence
// other than colours and styles is dropped (the server already removed them; this parser
// does not rely on that).
"use strict";

const FleetView = (() => {
  const $ = (id) => document.getElementById(id);
  const SVG = "http://www.w3.org/2000/svg";
  const TILE_LINES = 40;
  const LARGE_LINES = 120;
  const MAX_BACKOFF = 30000;
  const MEMBERS_PER_REQUEST = 64;  // the screens API's bound (web/screens.py MAX_MEMBERS)

  const view = {
    fleetId: null,
    detail: null,
    tiles: new Map(),        // member_id -> {tile, pre, badge, counts}
    visible: new Set(),      // member ids whose tile is on screen
    observer: null,
    timer: null,
    inFlight: false,
    interval: 1000,          // the server's cache interval (ms): asking faster gains nothing
    failures: 0,
    large: null,             // member id shown in the dialog
    graph: null,             // last GET /graph answer
    graphTimer: null,
    graphBusy: false,
    graphAgain: false,
    attentionSeen: null,     // keys already shown (null until the fleet's first answer)
    generation: 0,
  };

  function el(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }

  function svg(tag, attrs) {
    const node = document.createElementNS(SVG, tag);
    for (const [key, value] of Object.entries(attrs || {})) node.setAttribute(key, String(value));
    return node;
  }

  function memberLabel(id) {
    const member = view.detail && view.detail.members.find((m) => m.member_id === id);
    if (member) return `${member.name}#${id}`;
    const node = view.graph && view.graph.nodes.find((n) => n.member_id === id);
    return node ? `${node.name}#${id}` : `member#${id}`;
  }

  // --- ANSI colours ---------------------------------------------------------------------

  // SGR (group 1) is kept; every other sequence and control character is matched to be dropped.
  const SEQUENCE = /\x1b\[([0-9;:]*)m|\x1b\[[0-?]*[ -/]*[@-~]|\x1b[\]PX^_][^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?|\x1b[ -/]*[0-~]?|[\x00-\x08\x0b-\x1f\x7f-\x9f]/g;

  function plainStyle() {
    return { fg: null, bg: null, bold: false, dim: false, italic: false, underline: false, inverse: false, strike: false };
  }

  function extendedColour(codes, i) {
    // 38;5;N or 38;2;R;G;B: returns [colour, codes consumed after the 38/48]
    if (codes[i + 1] === 5 && codes[i + 2] !== undefined) return [clamp(codes[i + 2], 255), 2];
    if (codes[i + 1] === 2 && codes[i + 4] !== undefined) {
      return [[clamp(codes[i + 2], 255), clamp(codes[i + 3], 255), clamp(codes[i + 4], 255)], 4];
    }
    return [null, codes.length];
  }

  function clamp(value, max) {
    const n = Number.isFinite(value) ? Math.trunc(value) : 0;
    return Math.min(Math.max(n, 0), max);
  }

  function applySgr(style, params) {
    const codes = params === "" ? [0] : params.split(/[;:]/).map((p) => (p === "" ? 0 : Number(p)));
    const next = { ...style };
    for (let i = 0; i < codes.length; i += 1) {
      const code = codes[i];
      if (code === 0) Object.assign(next, plainStyle());
      else if (code === 1) next.bold = true;
      else if (code === 2) next.dim = true;
      else if (code === 3) next.italic = true;
      else if (code === 4) next.underline = true;
      else if (code === 7) next.inverse = true;
      else if (code === 9) next.strike = true;
      else if (code === 22) { next.bold = false; next.dim = false; }
      else if (code === 23) next.italic = false;
      else if (code === 24) next.underline = false;
      else if (code === 27) next.inverse = false;
      else if (code === 29) next.strike = false;
      else if (code >= 30 && code <= 37) next.fg = code - 30;
      else if (code >= 90 && code <= 97) next.fg = code - 90 + 8;
      else if (code >= 40 && code <= 47) next.bg = code - 40;
      else if (code >= 100 && code <= 107) next.bg = code - 100 + 8;
      else if (code === 39) next.fg = null;
      else if (code === 49) next.bg = null;
      else if (code === 38 || code === 48) {
        const [colour, used] = extendedColour(codes, i);
        if (code === 38) next.fg = colour; else next.bg = colour;
        i += used;
      }
    }
    return next;
  }

  function paletteRgb(index) {
    // xterm's 256 colours above the 16 named ones: a 6x6x6 cube, then 24 greys.
    if (index >= 232) { const v = 8 + (index - 232) * 10; return [v, v, v]; }
    const n = index - 16;
    const level = (x) => (x === 0 ? 0 : 55 + x * 40);
    return [level(Math.floor(n / 36)), level(Math.floor(n / 6) % 6), level(n % 6)];
  }

  function paint(node, which, colour) {
    if (colour === null) return;
    if (typeof colour === "number" && colour < 16) { node.classList.add(`${which}-${colour}`); return; }
    const [r, g, b] = typeof colour === "number" ? paletteRgb(colour) : colour;
    // CSSOM, not a style attribute: numbers only, and allowed by the page's CSP.
    if (which === "fg") node.style.color = `rgb(${r}, ${g}, ${b})`;
    else node.style.backgroundColor = `rgb(${r}, ${g}, ${b})`;
  }

  function styled(text, style) {
    const plain = style.fg === null && style.bg === null && !style.bold && !style.dim && !style.italic
      && !style.underline && !style.inverse && !style.strike;
    if (plain) return document.createTextNode(text);
    const span = el("span", null, text);
    const [fg, bg] = style.inverse ? [style.bg, style.fg] : [style.fg, style.bg];
    if (style.inverse) span.classList.add("ansi-inverse");
    for (const flag of ["bold", "dim", "italic", "underline", "strike"]) if (style[flag]) span.classList.add(`ansi-${flag}`);
    paint(span, "fg", fg);
    paint(span, "bg", bg);
    return span;
  }

  // Exposed for tests: the nodes a screen's text becomes.
  function renderAnsi(target, text) {
    const out = document.createDocumentFragment();
    let style = plainStyle();
    let last = 0;
    for (const match of text.matchAll(SEQUENCE)) {
      if (match.index > last) out.append(styled(text.slice(last, match.index), style));
      last = match.index + match[0].length;
      if (match[1] !== undefined) style = applySgr(style, match[1]);
    }
    if (last < text.length) out.append(styled(text.slice(last), style));
    target.replaceChildren(out);
  }

  // --- member screens -------------------------------------------------------------------

  function screenMembers() {
    if (!view.detail) return [];
    return view.detail.members.filter((m) => m.kind !== "director");
  }

  function syncTiles() {
    const grid = $("screens");
    const wanted = screenMembers();
    const ids = new Set(wanted.map((m) => m.member_id));
    for (const [id, parts] of view.tiles) {
      if (!ids.has(id)) {
        if (view.observer) view.observer.unobserve(parts.tile);
        parts.tile.remove();
        view.tiles.delete(id);
        view.visible.delete(id);
      }
    }
    for (const member of wanted) {
      let parts = view.tiles.get(member.member_id);
      if (!parts) {
        parts = makeTile(member.member_id);
        view.tiles.set(member.member_id, parts);
        grid.append(parts.tile);
        if (view.observer) view.observer.observe(parts.tile);
        else view.visible.add(member.member_id);
      }
      parts.name.textContent = member.name;
      parts.id.textContent = `#${member.member_id}`;
      parts.pane.textContent = member.pane_id ?? "pending";
      const stateName = member.state || "pending";
      parts.badge.className = `badge state-${stateName}`;
      parts.badge.textContent = stateName;
      parts.badge.title = member.state_detail || "";
      parts.tile.dataset.state = stateName;
    }
    $("screens-empty").hidden = wanted.length > 0;
    $("screens-count").textContent = `(${wanted.length})`;
    renderCounts();
  }

  function makeTile(memberId) {
    const tile = el("article", "tile");
    tile.dataset.memberId = String(memberId);
    tile.tabIndex = 0;
    const head = el("header", "tile-head");
    const name = el("span", "tile-name");
    const id = el("span", "id");
    const pane = el("span", "tile-pane muted");
    const badge = el("span", "badge");
    const counts = el("span", "tile-counts");
    head.append(name, id, badge, counts, pane);
    const pre = el("pre", "screen");
    pre.dataset.status = "loading";
    tile.append(head, pre);
    const open = () => openLarge(memberId);
    tile.addEventListener("click", open);
    tile.addEventListener("keydown", (event) => { if (event.key === "Enter") open(); });
    return { tile, pre, name, id, pane, badge, counts };
  }

  function renderCounts() {
    const nodes = new Map((view.graph ? view.graph.nodes : []).map((n) => [n.member_id, n]));
    for (const [memberId, parts] of view.tiles) {
      const node = nodes.get(memberId);
      const pending = node ? node.pending : 0;
      const unnotified = node ? node.unnotified : 0;
      parts.counts.replaceChildren(
        el("span", `count-pending${pending ? " some" : ""}`, `${pending} pending`),
        el("span", `count-unnotified${unnotified ? " some" : ""}`, `${unnotified} unnotified`),
      );
    }
  }

  function showScreen(pre, entry) {
    pre.dataset.status = entry.status;
    if (entry.status === "ok") {
      renderAnsi(pre, entry.text);
      pre.scrollTop = pre.scrollHeight;  // the newest lines, at the bottom
    } else {
      pre.replaceChildren(el("span", "screen-note", entry.status === "pending"
        ? "pane not created yet"
        : `${entry.status}: ${entry.error || ""}`));
    }
  }

  function schedule(delay) {
    clearTimeout(view.timer);
    view.timer = setTimeout(tick, delay);
  }

  async function tick() {
    view.timer = null;
    if (document.hidden || view.fleetId === null || view.inFlight) return;  // visibilitychange restarts it
    const large = view.large !== null && $("screen-dialog").open;
    const ids = large ? [view.large] : [...view.visible].filter((id) => view.tiles.has(id)).sort((a, b) => a - b);
    if (ids.length === 0) { $("screens-status").textContent = ""; return; }  // observer restarts it
    const generation = view.generation;
    view.inFlight = true;
    try {
      const lines = large ? LARGE_LINES : TILE_LINES;
      for (let start = 0; start < ids.length; start += MEMBERS_PER_REQUEST) {  // more tiles on screen: more requests
        const chunk = ids.slice(start, start + MEMBERS_PER_REQUEST);
        const response = await fetch(`/api/fleets/${view.fleetId}/screens?members=${chunk.join(",")}&lines=${lines}`);
        const body = await response.json().catch(() => null);
        if (generation !== view.generation) return;
        if (!response.ok) throw new Error(body && body.error ? body.error : `HTTP ${response.status}`);
        view.interval = Math.max(250, Math.round((body.interval || 1) * 1000));
        for (const entry of body.screens) {
          if (large && entry.member_id === view.large) showScreen($("screen-dialog-text"), entry);
          const parts = view.tiles.get(entry.member_id);
          if (parts && !large) showScreen(parts.pre, entry);
        }
      }
      view.failures = 0;
      $("screens-status").textContent = "";
    } catch (error) {
      view.failures += 1;
      $("screens-status").textContent = `screens paused: ${error.message}`;
    } finally {
      view.inFlight = false;
    }
    if (generation !== view.generation) return;
    const delay = view.failures ? Math.min(MAX_BACKOFF, view.interval * 2 ** view.failures) : view.interval;
    schedule(delay);
  }

  function kick() {
    if (!view.timer && !view.inFlight) schedule(0);
  }

  function openLarge(memberId) {
    view.large = memberId;
    const member = view.detail && view.detail.members.find((m) => m.member_id === memberId);
    $("screen-dialog-title").textContent = memberLabel(memberId);
    $("screen-dialog-meta").textContent = member ? `pane ${member.pane_id ?? "pending"} · ${member.state || ""}` : "";
    $("screen-dialog-text").replaceChildren();
    const dialog = $("screen-dialog");
    if (!dialog.open) dialog.showModal();
    clearTimeout(view.timer);
    view.timer = null;
    kick();
  }

  function closeLarge() {
    view.large = null;
    if ($("screen-dialog").open) $("screen-dialog").close();
    kick();
  }

  // --- the graph ------------------------------------------------------------------------

  function graphChanged() {
    if (view.fleetId === null) return;
    if (view.graphBusy) { view.graphAgain = true; return; }
    clearTimeout(view.graphTimer);
    view.graphTimer = setTimeout(loadGraph, 100);  // a burst of events costs one request
  }

  async function loadGraph() {
    const generation = view.generation;
    view.graphBusy = true;
    view.graphAgain = false;
    try {
      const response = await fetch(`/api/fleets/${view.fleetId}/graph`);
      if (!response.ok) return;
      const body = await response.json();
      if (generation !== view.generation) return;
      view.graph = body;
      drawGraph();
      drawSparklines();
      renderCounts();
    } catch (_) {
      // the event stream reconnects and reloads; the next change asks again
    } finally {
      view.graphBusy = false;
      if (view.graphAgain && generation === view.generation) graphChanged();
    }
  }

  function stateOf(memberId) {
    const member = view.detail && view.detail.members.find((m) => m.member_id === memberId);
    return member ? (member.state || "pending") : "gone";
  }

  function drawGraph() {
    const box = $("graph");
    const graph = view.graph;
    const width = 460;
    const height = 340;
    const root = svg("svg", { viewBox: `0 0 ${width} ${height}`, role: "img", class: "graph-svg" });
    root.append(svg("title"));
    root.firstChild.textContent = "Who messaged whom";
    const defs = svg("defs");
    for (const kind of ["edge", "pending", "unnotified"]) {
      const marker = svg("marker", { id: `arrow-${kind}`, viewBox: "0 0 10 10", refX: 9, refY: 5,
        markerWidth: 5, markerHeight: 5, orient: "auto-start-reverse" });
      marker.append(svg("path", { d: "M 0 0 L 10 5 L 0 10 z", class: `arrow arrow-${kind}` }));
      defs.append(marker);
    }
    root.append(defs);
    const nodes = graph.nodes.filter((n) => n.active || graph.edges.some((e) => e.from === n.member_id || e.to === n.member_id));
    nodes.sort((a, b) => (a.member_id === graph.director_member_id ? -1 : b.member_id === graph.director_member_id ? 1 : a.member_id - b.member_id));
    const cx = width / 2;
    const cy = height / 2;
    const radius = Math.min(width, height) / 2 - 50;
    const at = new Map();
    nodes.forEach((node, i) => {
      const angle = -Math.PI / 2 + (2 * Math.PI * i) / Math.max(1, nodes.length);
      const r = nodes.length === 1 ? 0 : radius;
      at.set(node.member_id, [cx + r * Math.cos(angle), cy + r * Math.sin(angle)]);
    });
    const edgeLayer = svg("g", { class: "edges" });
    const nodeRadius = 16;
    for (const edge of graph.edges) {
      const from = at.get(edge.from);
      const to = at.get(edge.to);
      if (!from || !to) continue;
      const kind = edge.unnotified ? "unnotified" : edge.pending ? "pending" : "edge";
      const group = svg("g", { class: `edge edge-${kind}`, "data-from": edge.from, "data-to": edge.to,
        "data-count": edge.count, "data-pending": edge.pending, "data-unnotified": edge.unnotified });
      const widthPx = 1 + Math.min(7, 1.6 * Math.log2(edge.count + 1));
      let path;
      let label;
      if (edge.from === edge.to) {
        const [x, y] = from;
        const dx = x - cx;
        const dy = y - cy;
        const len = Math.hypot(dx, dy) || 1;
        const ux = dx / len;
        const uy = len === 1 && dx === 0 ? -1 : dy / len;
        const lx = x + ux * 30;
        const ly = y + uy * 30;
        path = `M ${x + uy * 8} ${y - ux * 8} C ${lx + uy * 22} ${ly - ux * 22} ${lx - uy * 22} ${ly + ux * 22} ${x - uy * 8} ${y + ux * 8}`;
        label = [lx + ux * 8, ly + uy * 8];
      } else {
        const [x1, y1] = from;
        const [x2, y2] = to;
        const len = Math.hypot(x2 - x1, y2 - y1) || 1;
        const ux = (x2 - x1) / len;
        const uy = (y2 - y1) / len;
        const bend = 18;  // both directions of a pair curve apart
        const mx = (x1 + x2) / 2 - uy * bend;
        const my = (y1 + y2) / 2 + ux * bend;
        const sx = x1 + ux * nodeRadius;
        const sy = y1 + uy * nodeRadius;
        const ex = x2 - ux * (nodeRadius + 2);
        const ey = y2 - uy * (nodeRadius + 2);
        path = `M ${sx} ${sy} Q ${mx} ${my} ${ex} ${ey}`;
        label = [(sx + 2 * mx + ex) / 4, (sy + 2 * my + ey) / 4];
      }
      group.append(svg("path", { d: path, class: "edge-line", "stroke-width": widthPx.toFixed(2),
        "marker-end": `url(#arrow-${kind})` }));
      const text = svg("text", { x: label[0].toFixed(1), y: label[1].toFixed(1), class: "edge-label" });
      text.textContent = String(edge.count);
      const tip = svg("title");
      tip.textContent = `${memberLabel(edge.from)} → ${memberLabel(edge.to)}: ${edge.count} message${edge.count === 1 ? "" : "s"}, `
        + `${edge.pending} pending, ${edge.unnotified} preview${edge.unnotified === 1 ? "" : "s"} owed`;
      group.append(text, tip);
      edgeLayer.append(group);
    }
    const nodeLayer = svg("g", { class: "nodes" });
    for (const node of nodes) {
      const [x, y] = at.get(node.member_id);
      const group = svg("g", { class: `node state-${node.active ? stateOf(node.member_id) : "gone"}`, "data-member-id": node.member_id });
      group.append(svg("circle", { cx: x.toFixed(1), cy: y.toFixed(1), r: nodeRadius }));
      const initial = svg("text", { x: x.toFixed(1), y: (y + 4).toFixed(1), class: "node-id" });
      initial.textContent = String(node.member_id);
      const name = svg("text", { x: x.toFixed(1), y: (y + nodeRadius + 13).toFixed(1), class: "node-name" });
      name.textContent = node.member_id === graph.director_member_id ? "Director" : (node.name || "member");
      const tip = svg("title");
      tip.textContent = `${memberLabel(node.member_id)}: ${node.pending} pending, ${node.unnotified} unnotified`;
      group.append(initial, name, tip);
      nodeLayer.append(group);
    }
    root.append(edgeLayer, nodeLayer);
    box.replaceChildren(root);
  }

  function drawSparklines() {
    const body = $("sparklines").tBodies[0];
    body.replaceChildren();
    const graph = view.graph;
    const peak = Math.max(1, ...graph.nodes.map((n) => Math.max(...n.activity)));
    for (const node of graph.nodes) {
      if (!node.active && node.activity.every((v) => v === 0)) continue;
      const row = el("tr");
      row.dataset.memberId = String(node.member_id);
      const w = 180;
      const h = 22;
      const line = svg("svg", { viewBox: `0 0 ${w} ${h}`, class: "spark", width: w, height: h, role: "img" });
      const step = w / (node.activity.length - 1 || 1);
      const points = node.activity.map((v, i) => `${(i * step).toFixed(1)},${(h - 2 - ((h - 4) * v) / peak).toFixed(1)}`);
      line.append(svg("polyline", { points: points.join(" "), class: "spark-line" }));
      const total = node.activity.reduce((a, b) => a + b, 0);
      const tip = svg("title");
      tip.textContent = `${total} message${total === 1 ? "" : "s"} sent or received in the last hour (per minute)`;
      line.append(tip);
      const cell = el("td");
      cell.append(line);
      row.append(el("td", "spark-name", memberLabel(node.member_id)), cell, el("td", "spark-total", String(total)));
      body.append(row);
    }
  }

  // --- attention --------------------------------------------------------------------------

  const KIND_TEXT = { blocked: "is blocked", dead: "is dead", notify: "is owed a preview" };

  function attentionKey(item) {
    return `${item.kind}:${item.member_id}:${item.message_id ?? ""}`;
  }

  function renderAttention(attention) {
    const items = attention ? attention.items : [];
    const more = attention ? attention.owed_more : 0;
    const count = items.length + more;
    document.title = count ? `(${count}) cafleet` : "cafleet";
    const box = $("attention");
    box.hidden = count === 0;
    $("attention-title").textContent = count
      ? `${count} thing${count === 1 ? "" : "s"} need${count === 1 ? "s" : ""} you`
      : "";
    const list = $("attention-list");
    list.replaceChildren();
    for (const item of items) {
      const row = el("li", `attention-item attention-${item.kind}`);
      row.dataset.kind = item.kind;
      row.dataset.memberId = String(item.member_id);
      row.append(el("strong", null, `${memberLabel(item.member_id)} ${KIND_TEXT[item.kind] || item.kind}`),
        el("span", null, `: ${item.detail}`));
      if (item.command) row.append(el("code", null, item.command));
      if (item.dialog) row.append(dialogBox(item.member_id, item.dialog));
      list.append(row);
    }
    if (more) list.append(el("li", "attention-item", `and ${more} more owed previews`));
    notifyNew(items);
    updateNotifyButton();
  }

  // A blocked member's dialog (its visible text, as the server escaped it) and one button per
  // option (a dialog whose options the screen draws without numbers has them numbered 1..N
  // left to right, as the notice numbers them); a button answers through the same path as `cafleet member answer`, with
  // the dialog's digest and the label it shows, so a dialog that changed meanwhile is refused
  // and nothing is sent.
  function dialogBox(memberId, dialog) {
    const box = el("div", "attention-dialog");
    box.dataset.digest = dialog.digest;
    box.append(el("pre", "attention-dialog-text", dialog.text));
    const buttons = el("div", "attention-dialog-options");
    const status = el("span", "attention-dialog-status");
    for (const option of dialog.options) {
      const button = el("button", "secondary", `${option.number}. ${option.label}`);
      button.type = "button";
      button.dataset.choice = String(option.number);
      button.addEventListener("click", () => answer(memberId, option, dialog.digest, buttons, status));
      buttons.append(button);
    }
    buttons.append(status);
    box.append(buttons);
    if (dialog.numbered === false && dialog.options.length) {
      box.append(el("span", "attention-dialog-hint muted", "its buttons, numbered left to right"));
    }
    return box;
  }

  async function answer(memberId, option, digest, buttons, status) {
    for (const button of buttons.querySelectorAll("button")) button.disabled = true;
    status.dataset.kind = "";
    status.textContent = "answering…";
    try {
      const record = await api(`/api/members/${memberId}/answer`, {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ choice: option.number, dialog: digest, label: option.label }),
      });
      status.textContent = `answered ${record.choice}. ${record.label}`;
    } catch (error) {
      status.dataset.kind = "error";
      status.textContent = error.message;
      for (const button of buttons.querySelectorAll("button")) button.disabled = false;
    }
  }

  function notifyNew(items) {
    const keys = new Set(items.map(attentionKey));
    const first = view.attentionSeen === null;  // what the page opened with is on screen already
    const seen = view.attentionSeen || new Set();
    if (!first && "Notification" in window && Notification.permission === "granted") {
      for (const item of items) {
        if (seen.has(attentionKey(item))) continue;
        try {
          new Notification(`cafleet: ${memberLabel(item.member_id)} ${KIND_TEXT[item.kind] || item.kind}`,
            { body: item.detail, tag: attentionKey(item) });
        } catch (_) { /* some browsers allow notifications only from a service worker */ }
      }
    }
    view.attentionSeen = keys;
  }

  function updateNotifyButton() {
    const button = $("notify-enable");
    button.hidden = !("Notification" in window) || Notification.permission !== "default";
  }

  // --- hooks for app.js ---------------------------------------------------------------------

  function reset(fleetId) {
    view.generation += 1;
    view.fleetId = fleetId;
    view.detail = null;
    view.graph = null;
    view.attentionSeen = null;
    view.failures = 0;
    for (const parts of view.tiles.values()) if (view.observer) view.observer.unobserve(parts.tile);
    view.tiles.clear();
    view.visible.clear();
    $("screens").replaceChildren();
    $("graph").replaceChildren();
    $("sparklines").tBodies[0].replaceChildren();
    renderAttention(null);
    clearTimeout(view.timer);
    view.timer = null;
    if ($("screen-dialog").open) closeLarge();
  }

  function fleet(detail) {
    const first = view.detail === null;
    view.detail = detail;
    syncTiles();
    renderAttention(detail.attention);
    if (view.graph) drawGraph();  // node states follow the roster
    if (first) graphChanged();
    kick();
  }

  function start() {
    if ("IntersectionObserver" in window) {
      view.observer = new IntersectionObserver((entries) => {
        for (const entry of entries) {
          const id = Number(entry.target.dataset.memberId);
          if (entry.isIntersecting) view.visible.add(id); else view.visible.delete(id);
        }
        kick();
      });
    }
    document.addEventListener("visibilitychange", () => {
      if (document.hidden) { clearTimeout(view.timer); view.timer = null; } else { view.failures = 0; kick(); }
    });
    $("screen-dialog-close").addEventListener("click", closeLarge);
    $("screen-dialog").addEventListener("close", () => { view.large = null; kick(); });
    $("notify-enable").addEventListener("click", async () => {
      try { await Notification.requestPermission(); } catch (_) { /* refused */ }
      updateNotifyButton();
    });
    updateNotifyButton();
  }

  start();
  return { reset, fleet, messagesChanged: graphChanged, renderAnsi };
})();
