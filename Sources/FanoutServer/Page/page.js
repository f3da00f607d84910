// The live cart page's script (index.html), served at GET /page.js: a file of its own, so the
// page's Content-Security-Policy allows scripts from this server only ('self'), never inline ones.
"use strict";

// ---- Configuration, from the page's URL -------------------------------------------------------
const params = new URLSearchParams(location.search);
const token = params.get("token");          // for the stream (?token=) and changes (Bearer)
const onlyCarts = params.get("carts");      // optional: follow only these carts (a,b)
const FEED_LENGTH = 40;

// Bidirectional controls (LRE RLE PDF LRO RLO, LRI RLI FSI PDI, LRM RLM ALM) in a line's name, a
// user's name or a presence state would reorder the text around it on screen: they are shown as
// visible codes instead.
const BIDI_CONTROLS = /[\u202A-\u202E\u2066-\u2069\u200E\u200F\u061C]/g;
function shown(text) {
  return text.replace(BIDI_CONTROLS, (c) => "⟨U+" + c.charCodeAt(0).toString(16).toUpperCase().padStart(4, "0") + "⟩");
}

// A signed token's claims, read but not verified (the server verifies it, and refuses what it
// does not allow): whose carts these are, and whether to offer changes. The operator's token
// is not a JWT, and may change every cart.
function tokenClaims(text) {
  const parts = (text || "").split(".");
  if (parts.length !== 3) return null;
  try {
    const bytes = Uint8Array.from(atob(parts[1].replace(/-/g, "+").replace(/_/g, "/")), (c) => c.charCodeAt(0));
    const claims = JSON.parse(new TextDecoder().decode(bytes));
    return claims && typeof claims === "object" ? claims : null;
  } catch (error) {
    return null;
  }
}
const claims = tokenClaims(token);
const mayChange = claims === null || String(claims.scope || "").split(" ").includes("write");
if (!mayChange) document.body.classList.add("read-only");
if (claims !== null) {
  document.getElementById("who").textContent = "carts of " + shown(String(claims.sub)) + (mayChange ? "" : " · read only");
}

// Presence (docs/PROTOCOL.md, "Presence"): the page is a viewer of the carts it shows, and shows
// who else is looking, but only when it names them: the carts of its URL (/?carts=a,b), or those
// of its signed token's claim (the server takes them from the token, so the page does not name
// them in the stream's URL, where more than 100 would be refused). On all carts, presence is
// refused: then the page shows none.
const claimedCarts = claims && Array.isArray(claims.carts) && !claims.carts.includes("*") ? claims.carts.map(String) : [];
const presenceCarts = onlyCarts ? onlyCarts.split(",").filter(Boolean) : claimedCarts;
const presenceOn = presenceCarts.length > 0;
const me = { user: claims && claims.sub !== undefined ? String(claims.sub) : null, key: presenceOn ? ownPresenceKey() : null };

/// This tab's presence key: the same across its reloads, so it stays the same member. It is in
/// sessionStorage only between the tab's pagehide and its next load, so a duplicated tab (whose
/// sessionStorage is a copy) makes a key of its own instead of taking this tab's membership over.
function ownPresenceKey() {
  const item = "fanout.presenceKey";
  let key = null;
  try {
    key = sessionStorage.getItem(item);
    sessionStorage.removeItem(item);
    addEventListener("pagehide", () => { try { sessionStorage.setItem(item, me.key); } catch (error) { /* no storage */ } });
    addEventListener("pageshow", (shownAgain) => { if (shownAgain.persisted) try { sessionStorage.removeItem(item); } catch (error) { /* no storage */ } });
  } catch (error) { /* storage disabled: a key for this load only */ }
  if (key && /^[A-Za-z0-9._-]{1,64}$/.test(key)) return key;
  const bytes = crypto.getRandomValues(new Uint8Array(8));
  return "page-" + [...bytes].map((byte) => byte.toString(16).padStart(2, "0")).join("");
}

// ---- State ------------------------------------------------------------------------------------
const store = {
  carts: new Map(),      // id → {id, version, items: [{sku, quantity, unitPriceCents, name?, lineTotalCents}]}
  seq: null,             // the last seq applied: what the carts reflect
  parts: null,           // a snapshot being assembled: {seq, reason, carts}
  connection: "connecting",
  wasLive: false,        // a snapshot after this is a resync, not the first load
  subscriberId: null,
  since: "",             // what the state badge's note says (resumed / resynced)
  presence: new Map(),   // cart id → Map(member's [user, member] as JSON → Member), oldest first
};

// ---- Rendering, batched: only carts marked dirty are rebuilt ----------------------------------
const view = {
  grid: document.getElementById("carts"),
  elements: new Map(),   // id → the cart's element
  order: [],             // ids in display order (sorted)
  dirty: new Set(),
  fresh: new Map(),      // id → skus changed since the last render (highlighted)
  presenceDirty: new Set(), // ids whose viewers changed, and nothing else
  rebuildAll: false,
  feed: [],              // entries not yet shown
  scheduled: false,
};
const money = new Intl.NumberFormat(undefined, { minimumFractionDigits: 2, maximumFractionDigits: 2 });
const formatCents = (cents) => money.format(cents / 100);

function schedule() {
  if (view.scheduled) return;
  view.scheduled = true;
  // A hidden tab gets no animation frames; it still keeps its title and figures current.
  if (document.hidden) setTimeout(render, 250); else requestAnimationFrame(render);
}

function el(tag, attributes, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attributes || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") node.className = value;
    else if (key.startsWith("data-")) node.dataset[key.slice(5).replace(/-(.)/g, (_, c) => c.toUpperCase())] = value;
    else node.setAttribute(key, value);
  }
  for (const child of children) if (child !== null && child !== undefined) node.append(child);
  return node;
}

function cartElement(cart, freshSkus) {
  const rows = cart.items.map((item) => el("tr", { "data-sku": item.sku, class: freshSkus && freshSkus.has(item.sku) ? "fresh" : null },
    el("td", { class: "what" },
      item.name ? el("span", { class: "name", title: shown(item.name) }, shown(item.name)) : null,
      el("span", { class: item.name ? "sku" : "sku solo" }, item.sku),
      el("span", { class: "note" }, " × " + formatCents(item.unitPriceCents))),
    el("td", { class: "qty" },
      el("button", { class: "step", "data-action": "dec", title: "one less" }, "−"),
      el("span", { class: "n num" }, String(item.quantity)),
      el("button", { class: "step", "data-action": "inc", title: "one more" }, "+"),
      el("button", { class: "drop", "data-action": "remove", title: "remove the line" }, "×")),
    el("td", { class: "line-total num" }, formatCents(item.lineTotalCents))));
  return el("article", { class: "cart", "data-cart": cart.id, "data-version": cart.version },
    el("div", { class: "cart-head" },
      el("span", { class: "cart-id", title: "change this cart" }, cart.id),
      el("span", { class: "version" }, "v" + cart.version),
      el("span", { class: "total num" }, formatCents(cart.totalCents))),
    presenceOn ? viewersElement(cart.id) : null,
    cart.items.length ? el("table", {}, el("tbody", {}, ...rows)) : el("div", { class: "none" }, "empty"),
    el("div", { class: "cart-foot" },
      el("span", { class: "count" }, cart.itemCount + (cart.itemCount === 1 ? " item" : " items") + " · " + cart.items.length + (cart.items.length === 1 ? " line" : " lines")),
      el("button", { "data-action": "clear", title: "remove every line" }, "clear")));
}

// Who is looking at a cart: one chip per user (with how many tabs or devices when more than
// one), the anonymous ones together, this tab's own chip marked "you".
const MAX_VIEWER_CHIPS = 12;

/// A state's simple fields, as text: `editing` for true, `screen: checkout` for a string or a
/// number; false, null, objects and arrays are left out.
function describeState(state) {
  const parts = [];
  for (const [key, value] of Object.entries(state || {})) {
    if (value === true) parts.push(key.slice(0, 40));
    else if (typeof value === "string" || typeof value === "number") parts.push(key.slice(0, 40) + ": " + String(value).slice(0, 40));
    if (parts.length === 3) break;
  }
  return parts.join(", ");
}

function viewersElement(cartId) {
  const members = [...(store.presence.get(cartId) || new Map()).values()];
  const groups = new Map();  // "u:" + user, "you" (anonymous), "anonymous" → {user, count, you, states}
  for (const member of members) {
    const you = member.member === me.key && (member.user ?? null) === me.user;
    const id = typeof member.user === "string" ? "u:" + member.user : you ? "you" : "anonymous";
    const group = groups.get(id) || { user: typeof member.user === "string" ? member.user : null, count: 0, you: false, states: new Set() };
    group.count += 1;
    group.you ||= you;
    const state = describeState(member.state);
    if (state) group.states.add(state);
    groups.set(id, group);
  }
  const chips = [...groups.values()].slice(0, MAX_VIEWER_CHIPS).map((group) => {
    const name = group.user === null ? (group.count > 1 ? group.count + " anonymous" : "anonymous") : shown(group.user);
    const tabs = group.user !== null && group.count > 1 ? " ×" + group.count : "";
    const states = [...group.states].map(shown).join("; ");
    return el("span", {
      class: group.you ? "viewer you" : "viewer", "data-user": group.user ?? "", "data-count": String(group.count),
      title: group.user === null ? "no signed token" : group.count > 1 ? group.count + " tabs or devices" : null,
    },
      el("span", { class: "who" }, name + tabs),
      states ? el("span", { class: "viewer-state", title: states }, states) : null,
      group.you ? el("span", { class: "you-mark" }, "you") : null);
  });
  if (groups.size > MAX_VIEWER_CHIPS) chips.push(el("span", { class: "note" }, "+" + (groups.size - MAX_VIEWER_CHIPS) + " more"));
  return el("div", { class: "viewers", "data-members": String(members.length) },
    el("span", { class: "note" }, members.length ? "looking:" : "nobody looking"), ...chips);
}

/// The carts shown: the store's, and with presence every cart the page names, empty or not.
function shownCartIds() {
  return presenceOn ? [...new Set([...store.carts.keys(), ...presenceCarts])].sort() : [...store.carts.keys()].sort();
}

const emptyCart = (id) => withFigures({ id, version: 0, items: [] });

function matchesFilter(id) {
  const query = document.getElementById("filter").value.trim();
  return !query || id.includes(query);
}

function placeCart(id, element) {
  // Binary search for the sorted position of a cart that was not shown yet.
  let low = 0, high = view.order.length;
  while (low < high) { const mid = (low + high) >> 1; if (view.order[mid] < id) low = mid + 1; else high = mid; }
  view.order.splice(low, 0, id);
  const next = view.order[low + 1];
  view.grid.insertBefore(element, next === undefined ? null : view.elements.get(next));
}

function render() {
  view.scheduled = false;
  if (view.rebuildAll) {
    view.rebuildAll = false;
    view.order = shownCartIds();
    view.elements.clear();
    const fragment = document.createDocumentFragment();
    for (const id of view.order) {
      const element = cartElement(store.carts.get(id) || emptyCart(id));
      element.classList.toggle("hidden", !matchesFilter(id));
      view.elements.set(id, element);
      fragment.append(element);
    }
    if (!view.order.length) fragment.append(el("div", { class: "empty-store" }, "no carts yet: add a line to one"));
    view.grid.replaceChildren(fragment);
  } else {
    for (const id of view.dirty) {
      const cart = store.carts.get(id);
      const element = cartElement(cart, view.fresh.get(id));
      element.classList.add("flash");
      element.classList.toggle("hidden", !matchesFilter(id));
      const old = view.elements.get(id);
      view.elements.set(id, element);
      if (old) old.replaceWith(element);
      else {
        view.grid.querySelector(".empty-store")?.remove();
        placeCart(id, element);
      }
    }
    // Viewers that changed on a cart that did not: only its viewers are redrawn, no flash.
    for (const id of view.presenceDirty) {
      if (view.dirty.has(id)) continue;
      const element = view.elements.get(id);
      if (element) element.querySelector(".viewers").replaceWith(viewersElement(id));
      else if (store.wasLive) {  // before the first snapshot, its rebuild draws every cart
        const created = cartElement(store.carts.get(id) || emptyCart(id));
        created.classList.toggle("hidden", !matchesFilter(id));
        view.elements.set(id, created);
        view.grid.querySelector(".empty-store")?.remove();
        placeCart(id, created);
      }
    }
  }
  view.dirty.clear();
  view.presenceDirty.clear();
  view.fresh.clear();
  renderFigures();
  renderFeed();
}

function renderFigures() {
  let units = 0, total = 0;
  for (const cart of store.carts.values()) { units += cart.itemCount; total += cart.totalCents; }
  document.getElementById("seq").textContent = store.seq === null ? "–" : String(store.seq);
  document.getElementById("cart-count").textContent = String(store.carts.size);
  document.getElementById("unit-count").textContent = String(units);
  document.getElementById("grand-total").textContent = formatCents(total);
  document.title = "fanout · " + (store.seq === null ? "carts" : "seq " + store.seq) + (store.connection === "reconnecting" ? " (reconnecting)" : "");
}

function renderFeed() {
  if (!view.feed.length) return;
  const list = document.getElementById("feed");
  const fragment = document.createDocumentFragment();
  for (const entry of view.feed.slice(-FEED_LENGTH).reverse()) {
    fragment.append(el("li", { class: entry.kind, "data-seq": entry.seq },
      el("span", { class: "seq num" }, entry.seq === null ? "" : "#" + entry.seq),
      el("span", { class: "what", title: entry.text }, entry.text),
      el("span", { class: "at num" }, entry.at)));
  }
  view.feed = [];
  list.prepend(fragment);
  while (list.children.length > FEED_LENGTH) list.lastElementChild.remove();
}

function setConnection(connection, note) {
  store.connection = connection;
  const badge = document.getElementById("state");
  badge.dataset.state = connection;
  // Who is looking is known only while the stream is open: until it is again, dimmed.
  view.grid.classList.toggle("presence-stale", connection === "reconnecting" || connection === "refused");
  badge.textContent = {
    connecting: "connecting…", live: "live", reconnecting: "reconnecting…",
    resynced: "live · resynced from a snapshot", refused: "refused",
  }[connection];
  if (note !== undefined) document.getElementById("since").textContent = note;
  renderFigures();
}

function clock(date) {
  return date.toLocaleTimeString(undefined, { hour: "2-digit", minute: "2-digit", second: "2-digit", hour12: false });
}

function log(kind, seq, text, at) {
  view.feed.push({ kind, seq, text, at: clock(at || new Date()) });
  if (view.feed.length > FEED_LENGTH * 4) view.feed.splice(0, view.feed.length - FEED_LENGTH);
  schedule();
}

// ---- Applying what the stream says ------------------------------------------------------------
function withFigures(cart) {
  for (const item of cart.items) item.lineTotalCents = item.quantity * item.unitPriceCents;
  cart.totalCents = cart.items.reduce((sum, item) => sum + item.lineTotalCents, 0);
  cart.itemCount = cart.items.reduce((sum, item) => sum + item.quantity, 0);
  return cart;
}

function onSnapshot(message) {
  if (!store.parts || store.parts.seq !== message.seq || store.parts.reason !== message.reason) {
    store.parts = { seq: message.seq, reason: message.reason, carts: [] };
  }
  for (const cart of message.carts) store.parts.carts.push(cart);
  if (message.more) return;  // events follow the last part only
  const whole = store.parts;
  store.parts = null;
  store.carts = new Map(whole.carts.map((cart) => [cart.id, cart]));
  store.seq = whole.seq;
  view.rebuildAll = true;
  const resync = store.wasLive || whole.reason !== "initial";
  store.wasLive = true;
  setConnection(resync ? "resynced" : "live", resync ? "resynced at " + clock(new Date()) + " (" + whole.reason.replace(/_/g, " ") + ")" : "");
  log("snapshot", whole.seq, "snapshot: " + whole.carts.length + (whole.carts.length === 1 ? " cart" : " carts") + (whole.reason === "initial" ? "" : " (" + whole.reason.replace(/_/g, " ") + ")"));
}

function describe(event) {
  const change = event.change;
  switch (event.kind) {
    case "itemAdded": return event.cartId + ": +" + change.addedQuantity + " " + change.item.sku + " → " + change.item.quantity;
    case "quantityChanged": return event.cartId + ": " + change.sku + " → " + change.quantity;
    case "itemRemoved": return event.cartId + ": removed " + change.sku;
    case "cartCleared": return event.cartId + ": cleared";
    default: return event.cartId + ": " + event.kind;
  }
}

function onEvent(event) {
  if (store.parts) return;                                   // never sent mid-snapshot; ignore if it were
  if (store.seq !== null && event.seq <= store.seq) return;  // already applied (a replay)
  let cart = store.carts.get(event.cartId);
  if (!cart) { cart = { id: event.cartId, version: 0, items: [] }; store.carts.set(cart.id, cart); }
  const change = event.change;
  const fresh = view.fresh.get(cart.id) || new Set();
  switch (event.kind) {
    case "itemAdded": {
      const index = cart.items.findIndex((item) => item.sku === change.item.sku);
      if (index >= 0) cart.items[index] = change.item; else cart.items.push(change.item);
      fresh.add(change.item.sku);
      break;
    }
    case "quantityChanged": {
      const item = cart.items.find((line) => line.sku === change.sku);
      if (item) item.quantity = change.quantity;
      fresh.add(change.sku);
      break;
    }
    case "itemRemoved":
      cart.items = cart.items.filter((item) => item.sku !== change.sku);
      break;
    case "cartCleared":
      cart.items = [];
      break;
  }
  withFigures(cart);
  cart.version = event.version;
  store.seq = event.seq;
  view.fresh.set(cart.id, fresh);
  view.dirty.add(cart.id);
  log("event", event.seq, describe(event), new Date(event.committedAt));
}

/// The whole presence of a cart replaces what the page held (sent first, and again after each
/// reconnect, so nothing accumulates); a join, an update or a leave changes one member.
const memberID = (user, member) => JSON.stringify([typeof user === "string" ? user : null, member]);

function onPresence(name, message) {
  let members = store.presence.get(message.cartId);
  if (name === "presence" || !members) {
    members = new Map();
    store.presence.set(message.cartId, members);
  }
  switch (name) {
    case "presence":
      for (const member of message.members) members.set(memberID(member.user, member.member), member);
      break;
    case "presenceJoin":
    case "presenceUpdate":
      members.set(memberID(message.member.user, message.member.member), message.member);
      break;
    case "presenceLeave":
      members.delete(memberID(message.user, message.member));
      break;
  }
  view.presenceDirty.add(message.cartId);
  schedule();
}

// ---- The stream -------------------------------------------------------------------------------
let source = null;
let retryDelay = 1000;

function streamURL() {
  const query = new URLSearchParams();
  if (token) query.set("token", token);
  if (onlyCarts) query.set("carts", onlyCarts);
  if (presenceOn) { query.set("presence", "1"); query.set("presenceKey", me.key); }
  if (store.seq !== null) query.set("since", String(store.seq));
  const text = query.toString();
  return "/subscribe" + (text ? "?" + text : "");
}

function connect() {
  source = new EventSource(streamURL());
  source.onopen = () => { store.parts = null; };  // a snapshot cut short starts over
  source.addEventListener("welcome", (message) => {
    const welcome = JSON.parse(message.data);
    store.subscriberId = welcome.subscriberId;
    retryDelay = 1000;
    const resumed = store.wasLive && store.seq !== null;
    // A resume sends no snapshot: the missed events follow, and the stream is live again.
    if (resumed) setConnection("live", "resumed after #" + store.seq + " at " + clock(new Date()));
    document.getElementById("state").title = "subscriber " + welcome.subscriberId + " · server at seq " + welcome.latestSeq;
  });
  source.addEventListener("snapshot", (message) => onSnapshot(JSON.parse(message.data)));
  source.addEventListener("event", (message) => onEvent(JSON.parse(message.data)));
  for (const name of ["presence", "presenceJoin", "presenceUpdate", "presenceLeave"]) {
    source.addEventListener(name, (message) => onPresence(name, JSON.parse(message.data)));
  }
  source.addEventListener("server-error", (message) => {
    const error = JSON.parse(message.data);
    log("error", null, error.code + ": " + error.message);
  });
  source.onerror = () => {
    if (source.readyState !== EventSource.CLOSED) {  // the browser reconnects by itself, with Last-Event-ID
      setConnection("reconnecting");
      return;
    }
    // The browser gave up: the server answered with an error (503 while it stops, or a refusal).
    source.close();
    setConnection("reconnecting");
    whyRefused().then((refusal) => {
      if (refusal) {
        setConnection("refused", refusal);
        log("error", null, refusal);
        return;
      }
      setTimeout(connect, retryDelay);
      retryDelay = Math.min(retryDelay * 2, 10000);
    });
  };
}

/// An EventSource does not say why it failed: ask /subscribe as a plain request, which answers a
/// bad token or origin with its JSON error. Anything else (server down, 406 for a plain GET) is
/// worth another try.
async function whyRefused() {
  try {
    const response = await fetch(streamURL(), { headers: { Accept: "application/json" } });
    if (response.status === 401 || response.status === 403) {
      const body = await response.json().catch(() => null);
      return "the server refused the stream: " + (body?.error ? body.error.code + " — " + body.error.message : response.status)
        + (response.status === 401 ? " (open this page as /?token=…)" : "");
    }
  } catch (error) { /* not reachable: try again */ }
  return null;
}

// ---- Changes, through the HTTP API ------------------------------------------------------------
async function change(method, path, body) {
  const result = document.getElementById("result");
  const headers = { Accept: "application/json" };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  if (token) headers.Authorization = "Bearer " + token;
  const label = method + " " + path;
  try {
    const response = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
    const answer = await response.json().catch(() => null);
    if (response.ok && answer) {
      result.dataset.ok = "true";
      result.dataset.seq = answer.seq;
      result.dataset.deliveredTo = answer.deliveredTo;
      result.textContent = label + " → seq " + answer.seq + " · delivered to " + answer.deliveredTo
        + (answer.deliveredTo === 1 ? " subscriber" : " subscribers");
    } else {
      result.dataset.ok = "false";
      delete result.dataset.deliveredTo;
      result.textContent = label + " → " + response.status + " " + (answer?.error ? answer.error.code + ": " + answer.error.message : response.statusText);
    }
  } catch (error) {
    result.dataset.ok = "false";
    delete result.dataset.deliveredTo;
    result.textContent = label + " → the server is not reachable (" + error.message + ")";
  }
}

const itemsPath = (cart, sku) => "/carts/" + encodeURIComponent(cart) + "/items" + (sku === undefined ? "" : "/" + encodeURIComponent(sku));

document.getElementById("change").addEventListener("submit", (submit) => {
  submit.preventDefault();
  const form = submit.target;
  const op = submit.submitter?.value || "add";
  const cart = form.cart.value.trim(), sku = form.sku.value.trim();
  const quantity = Number(form.quantity.value);
  if (op === "remove") return change("DELETE", itemsPath(cart, sku));
  if (op === "set") return change("PATCH", itemsPath(cart, sku), { quantity });
  if (form.price.value === "") {
    const result = document.getElementById("result");
    result.dataset.ok = "false";
    result.textContent = "a unit price is needed to add a line";
    form.price.focus();
    return;
  }
  const body = { sku, quantity, unitPriceCents: Math.round(Number(form.price.value) * 100) };
  if (form.name.value.trim()) body.name = form.name.value.trim();
  return change("POST", itemsPath(cart), body);
});

view.grid.addEventListener("click", (click) => {
  const card = click.target.closest("[data-cart]");
  if (!card) return;
  const cartId = card.dataset.cart;
  if (click.target.closest(".cart-id") && mayChange) {  // fill the form with this cart
    const form = document.getElementById("change");
    form.cart.value = cartId;
    form.sku.focus();
    return;
  }
  const action = click.target.closest("[data-action]")?.dataset.action;
  if (!action || !mayChange) return;
  if (action === "clear") return change("DELETE", "/carts/" + encodeURIComponent(cartId));
  const sku = click.target.closest("[data-sku]").dataset.sku;
  const item = store.carts.get(cartId)?.items.find((line) => line.sku === sku);
  if (!item) return;
  if (action === "remove") return change("DELETE", itemsPath(cartId, sku));
  change("PATCH", itemsPath(cartId, sku), { quantity: Math.max(0, item.quantity + (action === "inc" ? 1 : -1)) });
});

document.getElementById("filter").addEventListener("input", () => {
  for (const [id, element] of view.elements) element.classList.toggle("hidden", !matchesFilter(id));
});

connect();
