// The schedule explorer's page logic. It draws forms and shows answers; every number comes from
// the WebAssembly module (tools/explorer/explorer_api.h: pw_schedules, pw_explore, pw_trace),
// i.e. from pipewright's C++ schedule library. The page's whole state lives in the URL's hash,
// so any view can be linked to (docs/explorer.md lists the keys).
'use strict';

const $ = (id) => document.getElementById(id);
let wasm = null;       // the Emscripten module
let registry = [];     // pw_schedules(): the registry's rows
let renders = 0;       // drawn answers, for the browser test to wait on

// ---- calling the module: JSON text in, JSON text out ----

function call(fn, arg) {
  const ptr = arg === undefined ? wasm.ccall(fn, 'number', [], [])
                                : wasm.ccall(fn, 'number', ['string'], [arg]);
  const text = wasm.UTF8ToString(ptr);
  wasm.ccall('pw_free', null, ['number'], [ptr]);
  return JSON.parse(text);
}

// ---- numbers as the C++ CLI prints them (schedule_svg --stats: %g and %.4f) ----

function fmt(x) {
  return Number(x.toPrecision(6)).toString();
}
function percent(fraction) {
  return (100 * fraction).toFixed(2) + ' %';
}

// ---- one panel: a schedule's inputs and its answer ----

const DEFAULTS = { s: '1f1b', p: '4', m: '8', v: '', r: 'never', F: '1', I: '1', W: '1', R: '1', c: '0', sf: '' };
const FIELDS = ['p', 'm', 'v', 'F', 'I', 'W', 'R', 'c', 'sf'];  // the panel's plain inputs, by URL key

function element(tag, attrs = {}, children = []) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === 'text') e.textContent = v;
    else if (k === 'class') e.className = v;
    else e.setAttribute(k, v);
  }
  for (const c of children) e.append(c);
  return e;
}

function numberInput(id, label, attrs) {
  return element('label', {}, [label + ' ', element('input', { id, type: 'number', ...attrs })]);
}

class Panel {
  constructor(root) {
    this.root = root;
    this.key = root.dataset.panel;          // 'a' or 'b'
    this.cells = null;                      // per-cell recompute grid, when chosen
    this.build();
  }

  id(name) {
    return `${this.key}-${name}`;
  }
  get(name) {
    return $(this.id(name));
  }

  build() {
    const id = (n) => this.id(n);
    const select = element('select', { id: id('schedule') });
    for (const row of registry) {
      select.append(element('option', { value: row.name, text: row.name }));
    }
    const recompute = element('select', { id: id('recompute') });
    for (const [value, text] of [['never', 'never'], ['always', 'always'],
                                 ['except_last', 'except_last (torchgpipe)'], ['cells', 'chosen cells']]) {
      recompute.append(element('option', { value, text }));
    }
    const source = element('fieldset', { class: 'source' }, [
      element('legend', { text: `Schedule ${this.key.toUpperCase()}` }),
      element('label', { class: 'inline' }, [
        element('input', { type: 'radio', name: id('source'), id: id('from-registry'), value: 'registry' }),
        ' from the registry']),
      element('label', { class: 'inline' }, [
        element('input', { type: 'radio', name: id('source'), id: id('from-csv'), value: 'csv' }),
        ' from CSV (pasted, loaded or written cell by cell)']),
    ]);
    const generated = element('div', { id: id('generated'), class: 'controls' }, [
      element('label', {}, ['schedule ', select]),
      element('p', { id: id('description'), class: 'description' }),
      numberInput(id('p'), 'workers p', { min: 1, max: 64, step: 1 }),
      numberInput(id('m'), 'micro-batches m', { min: 1, max: 256, step: 1 }),
      numberInput(id('v'), 'virtual stages v', { min: 1, max: 16, step: 1 }),
      element('label', {}, ['recompute ', recompute]),
      element('div', { id: id('cells'), class: 'cells', hidden: '' }),
    ]);
    const csv = element('div', { id: id('csv-box'), class: 'controls', hidden: '' }, [
      element('label', { class: 'block' }, [
        'pipewright CSV (with its "worker,index,..." header) or torch.distributed.pipelining\'s action CSV',
        element('textarea', { id: id('csv'), rows: 8, spellcheck: 'false' })]),
      element('label', {}, ['load a file ', element('input', { type: 'file', id: id('csv-file'), accept: '.csv,text/csv,text/plain' })]),
      element('button', { type: 'button', id: id('csv-from-current'), text: 'start from the last valid schedule' }),
      element('p', { class: 'description', text: 'Cell by cell: one row per worker, one cell per time slot, ' +
        'each "<stage><F|B|I|W><micro-batch>" as torch writes it (empty: idle). Edits are validated at once.' }),
      element('div', { id: id('grid'), class: 'grid' }),
      element('button', { type: 'button', id: id('grid-add'), text: 'add a column' }),
    ]);
    const costs = element('fieldset', { class: 'controls costs' }, [
      element('legend', { text: 'Costs per action on one stage' }),
      numberInput(id('F'), 'F', { min: 0, step: 'any' }),
      numberInput(id('I'), 'I (input-grad)', { min: 0, step: 'any' }),
      numberInput(id('W'), 'W (weight-grad)', { min: 0, step: 'any' }),
      numberInput(id('R'), 'R (recompute)', { min: 0, step: 'any' }),
      numberInput(id('c'), 'message', { min: 0, step: 'any' }),
      element('label', {}, ['stage factors ', element('input', { id: id('sf'), type: 'text', size: 14,
        placeholder: 'e.g. 1 1 1 2', 'aria-describedby': id('sf-help') })]),
      element('p', { class: 'description', id: id('sf-help'),
        text: 'Stage factors: one number per stage multiplying its costs (a slower stage, an uneven cut); empty: all 1.' }),
      element('p', { class: 'description', id: id('b-cost') }),
    ]);
    const results = element('div', { class: 'results' }, [
      element('p', { id: id('error'), class: 'error', role: 'alert' }),
      element('dl', { class: 'stats', id: id('stats') }, [
        element('dt', { text: 'makespan' }), element('dd', { id: id('makespan') }),
        element('dt', { text: 'bubble' }), element('dd', { id: id('bubble') }),
        element('dt', { text: '(p-1)/(m+p-1)' }), element('dd', { id: id('theory') }),
        element('dt', { text: 'peak activations per stage' }), element('dd', { id: id('peak-stage') }),
        element('dt', { text: 'peak activations per worker' }), element('dd', { id: id('peak-worker') }),
        element('dt', { text: 'peak checkpointed inputs per stage' }), element('dd', { id: id('peak-ckpt') }),
      ]),
      element('div', { id: id('timeline'), class: 'timeline', 'aria-label': `Timeline of schedule ${this.key.toUpperCase()}` }),
      element('details', {}, [element('summary', { text: 'the schedule as CSV' }),
                              element('pre', { id: id('csv-out') })]),
    ]);
    this.root.append(source, generated, csv, costs, results);

    for (const el of this.root.querySelectorAll('input, select, textarea')) {
      if (el.type === 'file') continue;
      el.addEventListener(el.tagName === 'SELECT' || el.type === 'radio' ? 'change' : 'input', () => this.changed(el));
    }
    this.get('csv-file').addEventListener('change', async (e) => {
      const file = e.target.files[0];
      if (file) {
        this.get('csv').value = await file.text();
        this.fillGrid();
        this.changed();
      }
    });
    this.get('csv-from-current').addEventListener('click', () => {
      if (this.last) this.get('csv').value = this.last.torch_csv ?? this.last.csv;
      this.fillGrid();
      this.changed();
    });
    this.get('grid-add').addEventListener('click', () => {
      for (const row of this.get('grid').querySelectorAll('tr')) row.append(this.gridCell(''));
    });
  }

  // The panel's state as URL keys (prefixed "b." for panel B).
  state() {
    const s = {};
    s.src = this.get('from-csv').checked ? 'csv' : 'registry';
    s.s = this.get('schedule').value;
    for (const k of FIELDS) s[k] = this.get(k).value;
    s.r = this.get('recompute').value;
    if (s.r === 'cells' && this.cells) s.r = 'cells:' + this.cells.map((row) => row.join('')).join('-');
    if (s.src === 'csv') s.csv = this.get('csv').value;
    return s;
  }

  load(state) {
    const s = { ...DEFAULTS, ...state };
    (s.src === 'csv' ? this.get('from-csv') : this.get('from-registry')).checked = true;
    this.get('schedule').value = registry.some((r) => r.name === s.s) ? s.s : DEFAULTS.s;
    for (const k of FIELDS) this.get(k).value = s[k];
    if (s.r.startsWith('cells:')) {
      this.get('recompute').value = 'cells';
      this.cells = s.r.slice(6).split('-').map((row) => [...row].map(Number));
    } else {
      this.get('recompute').value = s.r;
      this.cells = null;
    }
    this.get('csv').value = s.csv ?? '';
    if (s.src === 'csv') this.fillGrid();
  }

  changed(el) {
    if (el && el.id === this.id('schedule')) this.get('v').value = '';  // the row's least v
    if (el && el.id === this.id('csv')) this.fillGrid();
    update();
  }

  request() {
    const s = this.state();
    const costs = { F: +s.F, I: +s.I, W: +s.W, R: +s.R, B: +s.I + +s.W };
    const req = { costs, comm: +s.c };
    const factors = s.sf.split(/[\s,]+/).filter((f) => f !== '');
    const bad = factors.find((f) => !(Number(f) >= 0));
    if (bad !== undefined) throw new Error(`stage factors: '${bad}' is not a number >= 0`);
    if (factors.length) {
      req.per_stage = factors.map((f) => Object.fromEntries(Object.entries(costs).map(([k, c]) => [k, c * Number(f)])));
    }
    if (s.src === 'csv') return { ...req, csv: s.csv };
    req.schedule = s.s;
    req.p = Math.trunc(+s.p);
    req.m = Math.trunc(+s.m);
    if (s.v !== '') req.v = Math.trunc(+s.v);
    req.recompute = s.r.startsWith('cells:') ? this.cells : s.r === 'cells' ? 'never' : s.r;
    return req;
  }

  render() {
    const fromCsv = this.get('from-csv').checked;
    this.get('generated').hidden = fromCsv;
    this.get('csv-box').hidden = !fromCsv;
    const row = registry.find((r) => r.name === this.get('schedule').value);
    if (row) {
      this.get('description').textContent =
        `${row.description} (v: ${row.v_text}; placement: ${row.placement}` +
        `${row.splits_backward ? '; backward split into I and W' : ''})`;
      if (this.get('v').value === '') this.get('v').placeholder = String(row.v_min);
    }
    const i = +this.get('I').value, w = +this.get('W').value;
    this.get('b-cost').textContent = `B (a whole backward) = I + W = ${fmt(i + w)}`;

    let answer;
    try {
      answer = call('pw_explore', JSON.stringify(this.request()));
    } catch (e) {
      answer = { ok: false, error: e.message };  // an input the page itself refuses
    }
    this.get('error').textContent = answer.ok ? '' : answer.error;
    this.root.classList.toggle('invalid', !answer.ok);
    if (!answer.ok) {
      for (const k of ['makespan', 'bubble', 'theory', 'peak-stage', 'peak-worker', 'peak-ckpt']) {
        this.get(k).textContent = '–';
      }
      this.get('timeline').innerHTML = '';
      return;
    }
    this.last = answer;
    const mem = answer.memory;
    this.get('makespan').textContent = fmt(answer.replay.makespan);
    this.get('bubble').textContent = percent(answer.replay.bubble);
    this.get('theory').textContent = percent(answer.theoretical_bubble);
    this.get('peak-stage').textContent = mem.stage_activations.join(' ');
    this.get('peak-worker').textContent = mem.worker_activations.join(' ');
    this.get('peak-ckpt').textContent = mem.stage_checkpointed_inputs.join(' ');
    showSvg(this.get('timeline'), answer.svg);
    this.get('csv-out').textContent = answer.csv;
    if (!fromCsv) this.renderCells(answer.schedule);
  }

  // The per-cell recompute grid: a checkbox per (stage, micro-batch).
  renderCells(schedule) {
    const box = this.get('cells');
    const chosen = this.get('recompute').value === 'cells';
    box.hidden = !chosen;
    if (!chosen) return;
    const stages = schedule.stages, m = schedule.m;
    if (!this.cells || this.cells.length !== stages || this.cells[0].length !== m) {
      this.cells = Array.from({ length: stages }, () => Array(m).fill(0));
    }
    box.replaceChildren(element('p', { class: 'description',
      text: 'Checked cells keep only their input and recompute their forward before their backward.' }));
    const table = element('table');
    table.append(element('tr', {}, [element('th', { text: 'stage \\ mb' }),
      ...Array.from({ length: m }, (_, j) => element('th', { text: String(j) }))]));
    for (let s = 0; s < stages; ++s) {
      const tr = element('tr', {}, [element('th', { text: String(s) })]);
      for (let j = 0; j < m; ++j) {
        const box = element('input', { type: 'checkbox', 'aria-label': `recompute stage ${s} micro-batch ${j}` });
        box.checked = this.cells[s][j] === 1;
        box.addEventListener('change', () => { this.cells[s][j] = box.checked ? 1 : 0; update(); });
        tr.append(element('td', {}, [box]));
      }
      table.append(tr);
    }
    box.append(table);
  }

  // Cell-by-cell editing of torch's CSV: the grid and the text area are the same schedule.
  gridCell(text) {
    const input = element('input', { type: 'text', size: 4, 'aria-label': 'action' });
    input.value = text;
    input.addEventListener('input', () => {
      this.get('csv').value = this.gridText();
      update();
    });
    return element('td', {}, [input]);
  }

  fillGrid() {
    const text = this.get('csv').value;
    const grid = this.get('grid');
    if (text.includes('worker,index,')) {  // pipewright's CSV: edited as text only
      grid.replaceChildren(element('p', { class: 'description', text: 'This is pipewright\'s CSV: edit it as text, ' +
        'or start from the last valid schedule for a grid.' }));
      return;
    }
    const rows = text.split('\n').filter((line) => line.trim() !== '');
    const width = Math.max(1, ...rows.map((r) => r.split(',').length));
    const table = element('table');
    (rows.length ? rows : ['']).forEach((line, w) => {
      const cells = line.split(',');
      const tr = element('tr', {}, [element('th', { text: `worker ${w}` })]);
      for (let i = 0; i < width; ++i) tr.append(this.gridCell((cells[i] ?? '').trim()));
      table.append(tr);
    });
    grid.replaceChildren(table);
  }

  gridText() {
    return [...this.get('grid').querySelectorAll('tr')].map((tr) => {
      const cells = [...tr.querySelectorAll('input')].map((i) => i.value.trim());
      while (cells.length && cells[cells.length - 1] === '') cells.pop();
      return cells.join(',');
    }).join('\n') + '\n';
  }
}

// Puts to_svg's picture into `box`, with a viewBox so that "fit to the width" can scale it.
function showSvg(box, svg) {
  box.innerHTML = svg;
  const picture = box.querySelector('svg');
  picture.setAttribute('viewBox', `0 0 ${picture.getAttribute('width')} ${picture.getAttribute('height')}`);
}

// Side by side and fitted, timelines get the same pixels per time unit (the longest fills its
// box), so their lengths compare at a glance. to_svg draws one time unit at least 26 px wide,
// wider when the shortest action is short, so each picture's own unit is read back from its
// width and makespan (74 px of worker names on the left, 20 on the right).
function sameTimeScale(pairs) {  // [{ svg, makespan }]
  const shown = pairs.filter((p) => p.svg && p.makespan > 0);
  const unit = (p) => (Number(p.svg.getAttribute('width')) - 94) / p.makespan;
  const finest = Math.min(...shown.map(unit));
  const width = (p) => Number(p.svg.getAttribute('width')) * finest / unit(p);
  const widest = Math.max(...shown.map(width));
  for (const p of shown) {
    p.svg.style.width = shown.length > 1 && $('fit').checked ? `${(100 * width(p) / widest).toFixed(2)}%` : '';
  }
}

// ---- the page: panels, the URL, the trace ----

let panels = [];

function readHash() {
  const params = new URLSearchParams(location.hash.slice(1));
  const a = {}, b = {};
  for (const [k, v] of params) {
    if (k.startsWith('b.')) b[k.slice(2)] = v;
    else a[k] = v;
  }
  return { a, b, compare: params.get('compare') === '1' };
}

function writeHash() {
  const params = new URLSearchParams();
  // Every key, defaults too, so a link means the same view whatever later defaults become.
  const put = (prefix, state) => {
    for (const [k, v] of Object.entries(state)) {
      if ((k === 'src' && v === 'registry') || ((k === 'v' || k === 'sf') && v === '')) continue;
      params.set(prefix + k, v);
    }
  };
  put('', panels[0].state());
  if ($('compare').checked) {
    params.set('compare', '1');
    put('b.', panels[1].state());
  }
  history.replaceState(null, '', '#' + params.toString());
}

function update() {
  panels[1].root.hidden = !$('compare').checked;
  document.body.classList.toggle('comparing', $('compare').checked);
  document.body.classList.toggle('fit', $('fit').checked);
  for (const p of panels) if (!p.root.hidden) p.render();
  sameTimeScale(panels.filter((p) => !p.root.hidden && p.last && !p.root.classList.contains('invalid'))
    .map((p) => ({ svg: p.get('timeline').querySelector('svg'), makespan: p.last.replay.makespan })));
  compareLine();
  writeHash();
  document.body.dataset.renders = String(++renders);
}

// In compare mode, B against A in one line (ratios of what the two panels show).
function compareLine() {
  const [a, b] = panels;
  const line = $('b-versus');
  const valid = (p) => p.last && !p.root.classList.contains('invalid');
  if (b.root.hidden || !valid(a) || !valid(b)) {
    line.textContent = '';
    return;
  }
  const peak = (p) => Math.max(...p.last.memory.worker_activations);
  const points = 100 * (b.last.replay.bubble - a.last.replay.bubble);
  line.textContent = `B against A: makespan ×${fmt(b.last.replay.makespan / a.last.replay.makespan)}, ` +
    `bubble ${points >= 0 ? '+' : '−'}${Math.abs(points).toFixed(2)} points, ` +
    `largest peak per worker ${peak(b)} against ${peak(a)} cells`;
}

async function loadTrace(file) {
  const text = await file.text();
  const answer = call('pw_trace', text);
  $('trace-error').textContent = answer.ok ? '' : answer.error;
  const stats = $('trace-stats');
  stats.replaceChildren();
  $('trace-measured').innerHTML = '';
  $('trace-replayed').innerHTML = '';
  if (!answer.ok) return;
  // The same schedule replayed with each stage's mean measured costs (milliseconds).
  const replay = call('pw_explore', JSON.stringify({ csv: answer.csv, per_stage: answer.mean_costs }));
  const s = answer.schedule;
  const rows = [
    ['schedule', `p=${s.p}, stages=${s.stages}, m=${s.m}`],
    ['measured step', `${fmt(answer.measured.makespan)} ms`],
    ['measured bubble', percent(answer.measured.bubble)],
    ['bubble with measured durations, free hand-offs', percent(answer.replayed_bubble)],
    ['runtime\'s own idle (difference)', percent(answer.measured.bubble - answer.replayed_bubble)],
  ];
  if (replay.ok) {
    rows.push(['replay with mean costs', `${fmt(replay.replay.makespan)} ms, bubble ${percent(replay.replay.bubble)}`]);
    showSvg($('trace-replayed'), replay.svg);
  }
  for (const [k, v] of rows) stats.append(element('dt', { text: k }), element('dd', { text: v }));
  showSvg($('trace-measured'), answer.svg);
  sameTimeScale([{ svg: $('trace-measured').querySelector('svg'), makespan: answer.measured.makespan },
                 { svg: $('trace-replayed').querySelector('svg'), makespan: replay.ok ? replay.replay.makespan : 0 }]);
  document.body.dataset.renders = String(++renders);
}

function start() {
  registry = call('pw_schedules');
  panels = [new Panel($('panel-a')), new Panel($('panel-b'))];
  const fromUrl = () => {
    const { a, b, compare } = readHash();
    panels[0].load(a);
    panels[1].load(Object.keys(b).length ? b : { s: 'zb-h1' });
    $('compare').checked = compare;
    update();
  };
  fromUrl();
  window.addEventListener('hashchange', () => {
    // Only links followed by hand: our own replaceState does not fire it.
    fromUrl();
  });
  $('compare').addEventListener('change', update);
  $('fit').addEventListener('change', update);
  $('trace-file').addEventListener('change', (e) => e.target.files[0] && loadTrace(e.target.files[0]));
  // performance.now() counts from the navigation's start: the page, the module's download and
  // compilation, and the first answer drawn.
  const ms = performance.now();
  document.body.dataset.firstDrawMs = ms.toFixed(1);
  $('status').textContent = `Drawn ${ms.toFixed(0)} ms after the page was requested ` +
    `(${registry.length} schedules in the registry).`;
}

createExplorer().then((module) => {
  wasm = module;
  start();
}, (e) => {
  $('status').textContent = `The WebAssembly module did not load: ${e}`;
  throw e;
});
