// The schedule explorer in a real browser: Debian's Chromium, headless, driven over its DevTools
// protocol (through a pipe; no npm packages), loading the page from tools/explorer/serve.mjs.
// Checks, against the native C++ CLI (//tools:schedule_svg --stats) for the same input:
//   - 23 configurations over all nine registered schedules (recompute modes, uneven costs,
//     message costs, v > 1, per-stage factors): the makespan, bubble and peak activations per stage and per worker
//     the page shows equal the CLI's;
//   - refusals: a v the registry row refuses, and a hand-written CSV that deadlocks, show the
//     library's message (the CLI's, word for word);
//   - per-cell recompute, written cell by cell in the grid, equals the CLI on the same CSV;
//   - a replayed trace loaded as a file: its measured bubble equals the CLI's;
//   - compare mode, the URL's state (deep links), the keyboard, a phone's width;
//   - docs/schedules.md's ten pictures, opened from their "Open it live" links, are the same SVG;
//   - a screenshot of a known timeline against tests/tools/testdata/explorer_1f1b_4x8.png;
//   - no console errors or uncaught exceptions; the page + module within 2 MiB.
// Prints how long the first draw took (the navigation's start to the first timeline).
//
//   node explorer_browser_test.mjs SCHEDULE_SVG SITE_ROOT... [--update-screenshot FILE]
import { spawn, execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync, statSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, dirname, resolve } from 'node:path';
import { inflateSync } from 'node:zlib';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const args = process.argv.slice(2);
let updateScreenshot = null;
const updateAt = args.indexOf('--update-screenshot');
if (updateAt >= 0) updateScreenshot = args.splice(updateAt, 2)[1];
const [cli, ...roots] = args;
const { startServer } = await import(resolve(process.env.EXPLORER_SERVE ?? 'tools/explorer/serve.mjs'));

let failures = 0;
let checks = 0;
function check(ok, what) {
  ++checks;
  if (!ok) {
    ++failures;
    console.log(`FAIL: ${what}`);
  }
}

// ---- a minimal DevTools protocol client ----

const chromium = process.env.CHROMIUM ?? '/usr/bin/chromium';
try {
  statSync(chromium);
} catch {
  console.log(`FAIL: ${chromium} not found: install Debian's chromium (tools/bazel test does)`);
  process.exit(1);
}
let finished = false;  // set before we kill the browser ourselves
const profile = mkdtempSync(join(process.env.TEST_TMPDIR ?? tmpdir(), 'chromium-'));
// The protocol over a pipe (--remote-debugging-pipe: we write to its fd 3, read its fd 4, each
// message JSON ending in a NUL byte): no WebSocket, no port, any Node.js version.
const browser = spawn(chromium, [
  '--headless=new', '--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--no-first-run',
  '--disable-extensions', '--hide-scrollbars', '--force-device-scale-factor=1', '--font-render-hinting=none',
  '--remote-debugging-pipe', `--user-data-dir=${profile}`, '--window-size=1280,800', 'about:blank',
], { stdio: ['ignore', 'ignore', 'pipe', 'pipe', 'pipe'] });
let browserLog = '';
browser.stderr.on('data', (d) => { browserLog = (browserLog + d).slice(-4000); });
browser.on('exit', (code, signal) => {
  if (!finished) {
    console.log(`FAIL: chromium exited (${code ?? signal}) before the test ended:\n${browserLog}`);
    process.exit(1);
  }
});
const toBrowser = browser.stdio[3];
const fromBrowser = browser.stdio[4];

let nextId = 1;
const pending = new Map();
const listeners = [];
let received = Buffer.alloc(0);
fromBrowser.on('data', (chunk) => {
  received = Buffer.concat([received, chunk]);
  for (let end = received.indexOf(0); end >= 0; end = received.indexOf(0)) {
    const msg = JSON.parse(received.subarray(0, end).toString('utf8'));
    received = received.subarray(end + 1);
    if (msg.id && pending.has(msg.id)) {
      const { resolve: ok, reject: bad } = pending.get(msg.id);
      pending.delete(msg.id);
      msg.error ? bad(new Error(`${msg.error.message} (${msg.error.data ?? ''})`)) : ok(msg.result);
    } else if (msg.method) {
      for (const l of listeners) l(msg);
    }
  }
});
function send(method, params = {}, sessionId = undefined) {
  const id = nextId++;
  toBrowser.write(JSON.stringify({ id, method, params, sessionId }) + '\0');
  return new Promise((ok, bad) => pending.set(id, { resolve: ok, reject: bad }));
}

const { targetId } = await send('Target.createTarget', { url: 'about:blank' });
const { sessionId } = await send('Target.attachToTarget', { targetId, flatten: true });
const page = (method, params) => send(method, params, sessionId);
const consoleErrors = [];
listeners.push((msg) => {
  if (msg.sessionId !== sessionId) return;
  if (msg.method === 'Runtime.exceptionThrown') {
    consoleErrors.push(msg.params.exceptionDetails.exception?.description ?? msg.params.exceptionDetails.text);
  } else if (msg.method === 'Runtime.consoleAPICalled' && ['error', 'warning', 'assert'].includes(msg.params.type)) {
    consoleErrors.push(msg.params.args.map((a) => a.value ?? a.description).join(' '));
  } else if (msg.method === 'Log.entryAdded' && msg.params.entry.level === 'error') {
    consoleErrors.push(`${msg.params.entry.text} ${msg.params.entry.url ?? ''}`);
  }
});
await page('Runtime.enable');
await page('Log.enable');
await page('Page.enable');
await page('DOM.enable');

async function evaluate(expression) {
  const r = await page('Runtime.evaluate', { expression, returnByValue: true, awaitPromise: true });
  if (r.exceptionDetails) throw new Error(`${expression}: ${r.exceptionDetails.exception?.description}`);
  return r.result.value;
}
async function renders() {
  return Number(await evaluate('document.body?.dataset.renders ?? 0'));
}
async function waitFor(expression, what, ms = 15000) {
  const until = Date.now() + ms;
  for (;;) {
    if (await evaluate(expression).catch(() => false)) return;
    if (Date.now() > until) throw new Error(`timed out waiting for ${what} (${expression})`);
    await new Promise((r) => setTimeout(r, 20));
  }
}
// Runs `action` and waits until the page drew again.
async function andRedraw(action) {
  const before = await renders();
  await action();
  await waitFor(`Number(document.body.dataset.renders) > ${before}`, 'a redraw');
}
async function open(url) {
  await page('Page.navigate', { url: 'about:blank' });
  await page('Page.navigate', { url });
  await waitFor('document.body && document.body.dataset.renders >= 1', `the page at ${url}`);
}
// EXPLORER_SHOTS=DIR: also save whole-page screenshots there, to look at.
async function saveShot(name) {
  if (!process.env.EXPLORER_SHOTS) return;
  const shot = await page('Page.captureScreenshot', { format: 'png', captureBeyondViewport: true });
  writeFileSync(join(process.env.EXPLORER_SHOTS, name), Buffer.from(shot.data, 'base64'));
}
const text = (id) => evaluate(`document.getElementById(${JSON.stringify(id)}).textContent`);

// ---- the CLI's answer ----

function cliStats(cliArgs) {
  const out = execFileSync(cli, [...cliArgs, '--stats'], { encoding: 'utf8' });
  const head = /makespan ([^,]+), bubble (\S+)/.exec(out);
  const list = (label) => new RegExp(`${label}:\\s+(.*)`).exec(out)[1].trim();
  return {
    makespan: Number(head[1]), bubble: Number(head[2]),
    stage: list('peak activations per stage'), worker: list('peak activations per worker'),
  };
}
function cliError(cliArgs) {
  try {
    execFileSync(cli, [...cliArgs, '--stats'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
    return null;
  } catch (e) {
    return e.stderr.trim().replace(/^schedule_svg: /, '');
  }
}

async function pageStats(panel = 'a') {
  return {
    makespan: Number(await text(`${panel}-makespan`)),
    bubble: Number((await text(`${panel}-bubble`)).replace(' %', '')) / 100,
    stage: await text(`${panel}-peak-stage`),
    worker: await text(`${panel}-peak-worker`),
    error: await text(`${panel}-error`),
  };
}

// %g as the C++ prints it (to_svg's %.4g).
const fmt = (x) => String(Number(x.toPrecision(4)));

function compareStats(got, want, what) {
  check(got.error === '', `${what}: the page shows an error: ${got.error}`);
  // The CLI prints %g (6 significant digits) and %.4f; the page 6 significant digits and a
  // percentage with 2 decimals: equal to those roundings.
  check(Math.abs(got.makespan - want.makespan) <= 1e-6 * Math.max(1, want.makespan),
        `${what}: makespan ${got.makespan}, CLI ${want.makespan}`);
  check(Math.abs(got.bubble - want.bubble) <= 0.6e-4, `${what}: bubble ${got.bubble}, CLI ${want.bubble}`);
  check(got.stage === want.stage, `${what}: peak per stage "${got.stage}", CLI "${want.stage}"`);
  check(got.worker === want.worker, `${what}: peak per worker "${got.worker}", CLI "${want.worker}"`);
}

const { server, url } = await startServer(roots, 0);
try {
  // ---- 23 configurations, all nine schedules ----
  const configs = [
    { s: 'gpipe', p: 4, m: 8 },
    { s: 'gpipe', p: 4, m: 8, r: 'except_last' },
    { s: 'gpipe', p: 1, m: 1 },
    { s: '1f1b', p: 4, m: 8 },
    { s: '1f1b', p: 2, m: 5, F: 1, I: 1.5, W: 0.5, R: 1, c: 0.25 },
    { s: '1f1b', p: 4, m: 8, r: 'always' },
    { s: '1f1b', p: 8, m: 16 },
    { s: 'interleaved-1f1b', p: 4, m: 8, v: 2 },
    { s: 'interleaved-1f1b', p: 2, m: 4, v: 3, c: 0.5 },
    { s: 'zb-h1', p: 4, m: 8 },
    { s: 'zb-h1', p: 3, m: 6, F: 1, I: 1, W: 2, R: 1 },
    { s: 'zb-h2', p: 4, m: 8 },
    { s: 'zb-h2', p: 4, m: 12, c: 0.5 },
    { s: 'interleaved-zb', p: 4, m: 8, v: 2 },
    { s: 'interleaved-zb', p: 2, m: 4, v: 2, r: 'except_last' },
    { s: 'looped-bfs', p: 4, m: 8, v: 2 },
    { s: 'looped-bfs', p: 2, m: 6, v: 3, F: 2, I: 1, W: 1, R: 3 },
    { s: 'zb-v', p: 4, m: 8 },
    { s: 'zb-v', p: 4, m: 8, r: 'except_last', c: 0.5 },
    { s: 'dualpipev', p: 4, m: 8 },
    { s: 'dualpipev', p: 2, m: 6, F: 2, I: 1, W: 1, R: 2 },
    { s: '1f1b', p: 4, m: 8, sf: '1,1,1,2' },
    { s: 'zb-v', p: 2, m: 4, sf: '1,1.5,1,0.5', c: 0.25 },
  ];
  const covered = new Set(configs.map((c) => c.s));
  const registry = await (async () => {
    await open(url);
    return evaluate('registry.map((r) => r.name)');
  })();
  check(registry.length === 9 && registry.every((n) => covered.has(n)),
        `every registered schedule is among the configurations (registry: ${registry})`);
  for (const c of configs) {
    const cfg = { F: 1, I: 1, W: 1, R: 1, c: 0, r: 'never', ...c };
    const hash = new URLSearchParams({ s: cfg.s, p: cfg.p, m: cfg.m, ...(cfg.v ? { v: cfg.v } : {}), r: cfg.r,
                                       F: cfg.F, I: cfg.I, W: cfg.W, R: cfg.R, c: cfg.c,
                                       ...(cfg.sf ? { sf: cfg.sf } : {}) });
    await open(`${url}#${hash}`);
    const cliArgs = [cfg.s, String(cfg.p), String(cfg.m), ...(cfg.v ? [String(cfg.v)] : []),
                     '--recompute', cfg.r, '--costs', `${cfg.F},${cfg.I},${cfg.W},${cfg.R}`, '--comm', String(cfg.c),
                     ...(cfg.sf ? ['--stage-factors', cfg.sf] : [])];
    compareStats(await pageStats(), cliStats(cliArgs), cliArgs.join(' '));
    check((await evaluate(`document.querySelector('#a-timeline svg') !== null`)), `${cfg.s}: a timeline is drawn`);
    const tip = await evaluate(`document.querySelector('#a-timeline svg rect title')?.textContent`);
    check(tip === 'F0 on stage 0: 0 to ' + fmt(cfg.F), `${cfg.s}: the first box's tooltip is "${tip}"`);
  }

  // ---- docs/schedules.md's pictures, opened live from their links: the very same SVG ----
  const doc = readFileSync('docs/schedules.md', 'utf8');
  const live = [...doc.matchAll(/!\[[^\]]*\]\((img\/[\w.]+\.svg)\)\n\[Open it live\]\(http:\/\/127\.0\.0\.1:8765\/(#[^)]+)\)/g)];
  check(live.length === 10, `docs/schedules.md links ${live.length} pictures live, want 10`);
  for (const [, picture, hash] of live) {
    await open(`${url}${hash}`);
    const svg = await evaluate('panels[0].last.svg');
    check(svg === readFileSync(join('docs', picture), 'utf8'), `${hash} draws docs/${picture} exactly`);
  }

  // ---- the first draw's time and the bytes a visitor downloads ----
  await open(`${url}#s=1f1b&p=4&m=8`);
  const firstDrawMs = Number(await evaluate('document.body.dataset.firstDrawMs'));
  let bytes = 0;
  for (const root of roots) {
    for (const f of readdirSync(root)) {
      if (/\.(html|js|css|wasm)$/.test(f) && f !== 'serve.mjs') bytes += statSync(join(root, f)).size;
    }
  }
  check(bytes <= 2 * 1024 * 1024, `the page and its module are ${bytes} bytes, over 2 MiB`);

  // ---- a screenshot of a known timeline ----
  const box = await evaluate(`(() => { const r = document.querySelector('#a-timeline svg').getBoundingClientRect();
                                      return { x: r.x + scrollX, y: r.y + scrollY, width: r.width, height: r.height }; })()`);
  const shot = Buffer.from((await page('Page.captureScreenshot', {
    format: 'png', clip: { ...box, scale: 1 }, captureBeyondViewport: true })).data, 'base64');
  const reference = join(here, 'testdata', 'explorer_1f1b_4x8.png');
  if (updateScreenshot) {
    writeFileSync(updateScreenshot, shot);
    console.log(`wrote ${updateScreenshot}`);
  } else {
    const diff = compareImages(decodePng(shot), decodePng(readFileSync(reference)));
    check(diff.ok, `screenshot of 1f1b p=4 m=8 differs from ${reference}: ${diff.why}`);
  }

  // ---- refusals: the page's own for a factor that is no number, else the library's ----
  await open(`${url}#s=1f1b&p=2&m=2&sf=1,x`);
  check(await text('a-error') === "stage factors: 'x' is not a number >= 0", `a bad factor: "${await text('a-error')}"`);
  await open(`${url}#s=1f1b&p=2&m=2&sf=1,1,1`);
  check((await text('a-error')).includes('per_stage'), `three factors for two stages: "${await text('a-error')}"`);
  // ---- refusals show the library's own message ----
  await open(`${url}#s=interleaved-1f1b&p=4&m=8&v=1`);
  const refused = await text('a-error');
  const cliRefused = cliError(['interleaved-1f1b', '4', '8', '1']);
  check(refused !== '' && refused === cliRefused, `v=1 refused with "${refused}", CLI "${cliRefused}"`);
  check(await evaluate(`document.getElementById('panel-a').classList.contains('invalid')`), 'an invalid panel is marked');

  // A hand-written torch CSV that deadlocks: worker 0 waits for stage 1's backward of mb 0
  // before sending mb 1's forward that worker 1 runs first.
  const deadlock = '0F0,0B1,0F1,0B0\n1F1,1B1,1F0,1B0\n';
  const csvFile = join(profile, 'deadlock.csv');
  writeFileSync(csvFile, deadlock);
  await open(`${url}#src=csv&csv=${encodeURIComponent(deadlock)}`);
  const csvError = await text('a-error');
  const cliCsvError = cliError(['--from', csvFile]);
  // The same validator message; only the schedule's name differs (the file's path in the CLI).
  const deadlockPart = (m) => /deadlock: .*/.exec(m ?? '')?.[0];
  check(deadlockPart(csvError) !== undefined && deadlockPart(csvError) === deadlockPart(cliCsvError),
        `a deadlocking CSV: page "${csvError}", CLI "${cliCsvError}"`);

  // ---- writing a schedule cell by cell: gpipe p=2 m=2, then one cell changed ----
  const gpipe = execFileSync(cli, ['gpipe', '2', '2', '--torch-csv'], { encoding: 'utf8' });
  await open(`${url}#src=csv&csv=${encodeURIComponent(gpipe)}`);
  const gpipeFile = join(profile, 'gpipe.csv');
  writeFileSync(gpipeFile, gpipe);
  compareStats(await pageStats(), cliStats(['--from', gpipeFile]), 'gpipe 2 2 from its torch CSV');
  // Swap worker 1's last two cells (1B0, 1B1 -> 1B1, 1B0): still valid, same count of cells.
  const cells = await evaluate(`[...document.querySelectorAll('#a-grid tr')][1].querySelectorAll('input').length`);
  check(cells >= 4, `the grid has worker 1's ${cells} cells`);
  for (const [i, value] of [[cells - 2, '1B0'], [cells - 1, '1B1']]) {
    await andRedraw(() => evaluate(`(() => { const input = [...document.querySelectorAll('#a-grid tr')][1]
        .querySelectorAll('input')[${i}]; input.value = ${JSON.stringify(value)};
        input.dispatchEvent(new Event('input')); })()`));
  }
  const edited = await evaluate(`document.getElementById('a-csv').value`);
  const editedFile = join(profile, 'edited.csv');
  writeFileSync(editedFile, edited);
  compareStats(await pageStats(), cliStats(['--from', editedFile]), `the grid-edited CSV ${JSON.stringify(edited)}`);

  // ---- per-cell recompute from the URL (stage 0 keeps only its input for mb 0 and 1) ----
  await open(`${url}#s=1f1b&p=2&m=3&r=cells:110-000`);
  const ckpt = await text('a-peak-ckpt');
  check(ckpt === '2 0', `cells 110-000: peak checkpointed inputs per stage "${ckpt}", want "2 0"`);
  const cellCsv = await evaluate(`document.getElementById('a-csv-out').textContent`);
  const cellFile = join(profile, 'cells.csv');
  writeFileSync(cellFile, cellCsv);
  compareStats(await pageStats(), cliStats(['--from', cellFile]), '1f1b 2 3 with cells 110-000');
  // A checkbox of the grid, clicked, recomputes that cell too.
  await andRedraw(() => evaluate(`document.querySelector('#a-cells input[aria-label="recompute stage 1 micro-batch 0"]').click()`));
  check(new URLSearchParams((await evaluate('location.hash')).slice(1)).get('r') === 'cells:110-100',
        `clicking a cell updates the URL (${await evaluate('location.hash')})`);

  // ---- compare mode: B beside A, both in the URL ----
  await open(`${url}#s=gpipe&p=4&m=8&compare=1&b.s=zb-h1&b.p=4&b.m=8`);
  check(!(await evaluate(`document.getElementById('panel-b').hidden`)), 'compare mode shows panel B');
  compareStats(await pageStats('b'), cliStats(['zb-h1', '4', '8']), 'panel B: zb-h1 4 8');
  compareStats(await pageStats('a'), cliStats(['gpipe', '4', '8']), 'panel A beside B: gpipe 4 8');
  const sideBySide = await evaluate(`document.getElementById('panel-b').getBoundingClientRect().top ===
                                     document.getElementById('panel-a').getBoundingClientRect().top`);
  check(sideBySide, 'at 1280 px the two panels stand side by side');
  const versus = await text('b-versus');
  const gp = cliStats(['gpipe', '4', '8']), zb = cliStats(['zb-h1', '4', '8']);
  check(versus === `B against A: makespan ×${Number((zb.makespan / gp.makespan).toPrecision(6))}, bubble −` +
                   `${(100 * (gp.bubble - zb.bubble)).toFixed(2)} points, largest peak per worker 4 against 8 cells`,
        `the comparison line: "${versus}"`);
  // The same time scale: zb-h1's 27 units drawn 27/33 as wide as gpipe's 33.
  const ratio = await evaluate(`document.querySelector('#b-timeline svg').getBoundingClientRect().width /
                                document.querySelector('#a-timeline svg').getBoundingClientRect().width`);
  const wantRatio = (94 + 27 * 26) / (94 + 33 * 26);
  check(Math.abs(ratio - wantRatio) < 0.01,
        `B's timeline is ${ratio.toFixed(3)} of A's width, want ${wantRatio.toFixed(3)}`);
  await saveShot('compare-1280.png');

  // ---- the keyboard: focus the schedule list, ArrowDown picks the next schedule ----
  await open(`${url}#s=gpipe&p=4&m=8`);
  await evaluate(`document.getElementById('a-schedule').focus()`);
  await andRedraw(async () => {
    await page('Input.dispatchKeyEvent', { type: 'keyDown', key: 'ArrowDown', code: 'ArrowDown', windowsVirtualKeyCode: 40 });
    await page('Input.dispatchKeyEvent', { type: 'keyUp', key: 'ArrowDown', code: 'ArrowDown', windowsVirtualKeyCode: 40 });
  });
  const chosen = await evaluate(`document.getElementById('a-schedule').value`);
  check(chosen === '1f1b', `ArrowDown on the schedule list picks 1f1b (got ${chosen})`);
  compareStats(await pageStats(), cliStats(['1f1b', '4', '8']), 'after the keyboard chose 1f1b 4 8');
  check(new URLSearchParams((await evaluate('location.hash')).slice(1)).get('s') === '1f1b',
        'the URL follows the keyboard');

  // ---- a replayed trace loaded as a file: measured = replayed with its own durations ----
  const traceFile = join(profile, 'trace.json');
  writeFileSync(traceFile, execFileSync(cli, ['zb-h1', '2', '4', '--trace'], { encoding: 'utf8' }));
  const { root } = await page('DOM.getDocument', { depth: 0 });
  const { nodeId } = await page('DOM.querySelector', { nodeId: root.nodeId, selector: '#trace-file' });
  await andRedraw(() => page('DOM.setFileInputFiles', { nodeId, files: [traceFile] }));
  const traceStats = await evaluate(`[...document.querySelectorAll('#trace-stats dd')].map((d) => d.textContent)`);
  const want = cliStats(['zb-h1', '2', '4']);
  check(Math.abs(Number(traceStats[2].replace(' %', '')) / 100 - want.bubble) <= 0.6e-4,
        `the trace's measured bubble ${traceStats[2]}, CLI ${want.bubble}`);
  check(traceStats[2] === traceStats[3], `a replayed trace's bubble ${traceStats[2]} equals its replay's ${traceStats[3]}`);
  check(await evaluate(`document.querySelector('#trace-measured svg') !== null &&
                        document.querySelector('#trace-replayed svg') !== null`), 'both trace timelines are drawn');

  // ---- a phone's width: nothing but the timelines scrolls sideways ----
  await page('Emulation.setDeviceMetricsOverride', { width: 390, height: 844, deviceScaleFactor: 1, mobile: true });
  await open(`${url}#s=interleaved-1f1b&p=4&m=8&v=2&compare=1`);
  const overflow = await evaluate('document.documentElement.scrollWidth');
  check(overflow <= 390, `at 390 px wide the page is ${overflow} px wide`);
  await saveShot('phone-390.png');
  await page('Emulation.clearDeviceMetricsOverride');

  check(consoleErrors.length === 0, `console errors: ${consoleErrors.join(' | ')}`);
  console.log(`first draw: ${firstDrawMs} ms after navigation (page + module: ${bytes} bytes)`);
} catch (e) {
  ++failures;
  console.log(`FAIL: ${e.stack}`);
} finally {
  server.close();
  finished = true;
  browser.kill('SIGKILL');
  try { rmSync(profile, { recursive: true, force: true }); } catch {}
}
console.log(`${checks - failures} of ${checks} checks passed`);
process.exit(failures ? 1 : 0);

// ---- PNG: decode (8-bit, non-interlaced, RGB or RGBA) and compare ----

function decodePng(buf) {
  let pos = 8, width = 0, height = 0, colorType = 0;
  const idat = [];
  while (pos < buf.length) {
    const len = buf.readUInt32BE(pos), type = buf.toString('ascii', pos + 4, pos + 8);
    const data = buf.subarray(pos + 8, pos + 8 + len);
    if (type === 'IHDR') {
      width = data.readUInt32BE(0); height = data.readUInt32BE(4); colorType = data[9];
      if (data[8] !== 8 || data[12] !== 0 || ![2, 6].includes(colorType)) throw new Error('unsupported PNG');
    } else if (type === 'IDAT') idat.push(data);
    pos += 12 + len;
  }
  const bpp = colorType === 6 ? 4 : 3, stride = width * bpp;
  const raw = inflateSync(Buffer.concat(idat));
  const out = Buffer.alloc(width * height * 3);
  let prev = Buffer.alloc(stride);
  for (let y = 0; y < height; ++y) {
    const filter = raw[y * (stride + 1)];
    const line = Buffer.from(raw.subarray(y * (stride + 1) + 1, (y + 1) * (stride + 1)));
    for (let i = 0; i < stride; ++i) {
      const a = i >= bpp ? line[i - bpp] : 0, b = prev[i], c = i >= bpp ? prev[i - bpp] : 0;
      let pred = 0;
      if (filter === 1) pred = a;
      else if (filter === 2) pred = b;
      else if (filter === 3) pred = (a + b) >> 1;
      else if (filter === 4) {
        const p = a + b - c, pa = Math.abs(p - a), pb = Math.abs(p - b), pc = Math.abs(p - c);
        pred = pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
      }
      line[i] = (line[i] + pred) & 255;
    }
    for (let x = 0; x < width; ++x) line.copy(out, (y * width + x) * 3, x * bpp, x * bpp + 3);
    prev = line;
  }
  return { width, height, rgb: out };
}

// Same size, and at most 2 % of the pixels off by more than 64 in a channel (fonts may
// render a little differently between Chromium builds; boxes, colours and layout may not).
function compareImages(got, want) {
  if (got.width !== want.width || got.height !== want.height) {
    return { ok: false, why: `size ${got.width}x${got.height}, reference ${want.width}x${want.height}` };
  }
  let off = 0;
  for (let i = 0; i < got.rgb.length; i += 3) {
    if (Math.max(Math.abs(got.rgb[i] - want.rgb[i]), Math.abs(got.rgb[i + 1] - want.rgb[i + 1]),
                 Math.abs(got.rgb[i + 2] - want.rgb[i + 2])) > 64) ++off;
  }
  const fraction = off / (got.width * got.height);
  return { ok: fraction <= 0.02, why: `${(100 * fraction).toFixed(2)} % of the pixels differ` };
}
