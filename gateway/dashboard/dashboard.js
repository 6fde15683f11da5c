'use strict';
// The gateway's dashboard: follows GET v1/watch (Server-Sent Events) and
// shows each key's holders, waiters in order, semaphore usage and election
// leader. Everything shown comes from the stream and is set as text, never
// as markup. Times left are counted down here from each state's ttl_ms,
// which the gateway counts from when it wrote the event.
(() => {
  const keys = new Map(); // key -> {info, at: performance.now() at receipt}
  const $ = (id) => document.getElementById(id);
  const prefixInput = $('prefix');
  prefixInput.value = new URLSearchParams(location.search).get('prefix') || '';
  let source = null;
  let lastID = '';
  let retry = null;

  function setState(state, text) {
    document.body.dataset.state = state;
    $('status').textContent = text;
  }

  // EventSource cannot send an Authorization header, and a long-lived
  // secret must not go in a URL: the page fetches a single-use, short-lived
  // stream ticket with an ordinary request (which carries the page's
  // credentials) and opens the stream with it. A ticket opens one stream,
  // so the page reconnects itself, with a new ticket, instead of letting
  // EventSource retry with a spent one.
  // With authentication on, the ticket request carries the bearer token
  // the user typed, kept in this tab's sessionStorage only: it never goes
  // in a URL, and is gone when the tab closes.
  const tokenKey = 'dlock-gateway-token';
  class NeedToken extends Error {}

  async function streamURL() {
    const headers = {};
    const token = sessionStorage.getItem(tokenKey);
    if (token) headers.Authorization = 'Bearer ' + token;
    const r = await fetch('v1/stream-tickets', {method: 'POST', headers});
    if (r.status === 401) {
      sessionStorage.removeItem(tokenKey); // wrong, or no longer valid
      throw new NeedToken();
    }
    if (!r.ok) throw new Error('stream ticket: HTTP ' + r.status);
    const q = new URLSearchParams({prefix: prefixInput.value, stream_ticket: (await r.json()).stream_ticket});
    if (lastID) q.set('last_event_id', lastID); // resumed: no snapshot if the view is unchanged
    return 'v1/watch?' + q;
  }

  async function connect() {
    retry = null;
    let url;
    try {
      url = await streamURL();
    } catch (e) {
      if (e instanceof NeedToken) askToken();
      else reconnect();
      return;
    }
    const es = new EventSource(url);
    source = es;
    es.onopen = () => setState('live', 'live');
    es.onerror = () => reconnect();
    es.addEventListener('snapshot', (ev) => {
      const d = JSON.parse(ev.data);
      keys.clear();
      for (const k of d.keys) keys.set(k.key, {info: k, at: performance.now()});
      lastID = ev.lastEventId;
      render();
    });
    es.addEventListener('key', (ev) => {
      const k = JSON.parse(ev.data);
      if (k.holders.length === 0 && k.waiters.length === 0) keys.delete(k.key);
      else keys.set(k.key, {info: k, at: performance.now()});
      lastID = ev.lastEventId;
      render();
    });
  }

  function reconnect() {
    if (source) source.close();
    source = null;
    setState('reconnecting', 'reconnecting…');
    if (!retry) retry = setTimeout(connect, 1000);
  }

  function askToken() {
    setState('login', 'token needed');
    $('login').hidden = false;
    $('token').focus();
  }

  $('login').addEventListener('submit', (ev) => {
    ev.preventDefault();
    sessionStorage.setItem(tokenKey, $('token').value.trim());
    $('token').value = '';
    $('login').hidden = true;
    setState('connecting', 'connecting…');
    connect();
  });

  $('filter').addEventListener('submit', (ev) => {
    ev.preventDefault();
    const u = new URL(location.href);
    if (prefixInput.value) u.searchParams.set('prefix', prefixInput.value);
    else u.searchParams.delete('prefix');
    history.replaceState(null, '', u);
    lastID = '';
    keys.clear();
    render();
    if (source) source.close();
    source = null;
    clearTimeout(retry);
    connect();
  });

  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }

  function who(e) {
    const m = e.metadata || {};
    return [m.host, m.pid ? 'pid ' + m.pid : '', m.note].filter(Boolean).join(' · ');
  }

  function entry(e, cls, at, showMode) {
    const li = el('li', cls);
    if (e.token_str !== '0') { // a waiter has no token yet
      li.dataset.token = e.token_str;
      li.append(el('span', 'token', '#' + e.token_str), ' ');
    }
    if (showMode) li.append(el('span', 'mode', e.mode === 'shared' ? 'read' : 'write'), ' ');
    if (e.value) li.append(el('span', 'value', e.value), ' ');
    const w = who(e);
    if (w) li.append(el('span', 'meta', w));
    if (cls === 'holder' && e.ttl_ms !== undefined) {
      const t = el('span', 'ttl');
      t.dataset.deadline = String(at + e.ttl_ms);
      li.append(t);
    }
    return li;
  }

  function card(k, at) {
    const s = el('section', 'key');
    s.dataset.key = k.key;
    s.dataset.kind = k.kind;
    s.append(el('h2', '', k.key));
    const sum = el('div', 'summary');
    sum.append(el('span', 'kind', k.kind));
    if (k.kind === 'semaphore') {
      sum.append(el('span', 'usage', k.holders.length + ' / ' + k.limit + ' permits'));
      const bar = el('span', 'usage-bar');
      const fill = el('span');
      fill.style.width = Math.min(100, (100 * k.holders.length) / Math.max(1, k.limit)) + '%';
      bar.append(fill);
      sum.append(bar);
    } else if (k.kind === 'election') {
      sum.append('leader ', k.holders.length ? el('span', 'leader', k.holders[0].value || '(no value)') : el('span', 'none', 'nobody'));
    }
    s.append(sum);
    const rw = k.kind === 'rwmutex';
    s.append(el('h3', '', k.kind === 'election' ? 'Term' : 'Holders'));
    const hs = el('ul', 'holders');
    for (const e of k.holders) hs.append(entry(e, 'holder', at, rw));
    if (!k.holders.length) hs.append(el('li', 'none', 'none'));
    s.append(hs);
    s.append(el('h3', '', k.kind === 'election' ? 'Candidates, in order' : 'Waiters, in order'));
    const ws = el('ol', 'waiters');
    for (const e of k.waiters) ws.append(entry(e, 'waiter', at, rw));
    if (!k.waiters.length) ws.append(el('li', 'none', 'none'));
    s.append(ws);
    return s;
  }

  function render() {
    const list = $('keys');
    const cards = [...keys.keys()].sort().map((name) => card(keys.get(name).info, keys.get(name).at));
    list.replaceChildren(...cards);
    $('empty').hidden = cards.length > 0;
    tick();
  }

  function tick() {
    const now = performance.now();
    for (const t of document.querySelectorAll('.ttl')) {
      const left = Math.max(0, Number(t.dataset.deadline) - now);
      t.textContent = (left / 1000).toFixed(1) + ' s';
      t.classList.toggle('low', left < 3000);
    }
  }

  setInterval(tick, 100);
  setState('connecting', 'connecting…');
  connect();
})();
