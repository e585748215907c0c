// A static file server for the schedule explorer: GET only, 127.0.0.1 only, files from the
// given folders (the first that has the path wins; "/" is index.html). No server logic: every
// number on the page is computed in the browser by the WebAssembly module.
//
//   node serve.mjs [--port 8765] ROOT...        (port 0: any free port)
//
// Also imported by the browser test (tests/tools/explorer_browser_test.mjs): startServer.
import { createServer } from 'node:http';
import { realpathSync } from 'node:fs';
import { readFile, stat } from 'node:fs/promises';
import { extname, join, normalize, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';

const TYPES = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.mjs': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.wasm': 'application/wasm',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  '.json': 'application/json',
  '.csv': 'text/csv; charset=utf-8',
  '.ico': 'image/x-icon',
};

async function find(roots, urlPath) {
  const rel = normalize(decodeURIComponent(urlPath)).replace(/^([/\\])+/, '') || 'index.html';
  for (const root of roots) {
    const full = resolve(root, rel);
    if (full !== resolve(root) && !full.startsWith(resolve(root) + sep)) continue;  // no "../"
    try {
      if ((await stat(full)).isFile()) return full;
    } catch {}
  }
  return null;
}

/** Starts serving `roots` on 127.0.0.1:`port`; resolves to { server, url }. */
export function startServer(roots, port = 8765) {
  const server = createServer(async (req, res) => {
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      res.writeHead(405).end();
      return;
    }
    const path = new URL(req.url, 'http://localhost').pathname;
    const file = await find(roots, path).catch(() => null);
    if (!file) {
      res.writeHead(404, { 'content-type': 'text/plain' }).end(`not found: ${path}\n`);
      return;
    }
    const body = await readFile(file);
    res.writeHead(200, {
      'content-type': TYPES[extname(file)] ?? 'application/octet-stream',
      'cache-control': 'no-cache',
    });
    res.end(req.method === 'HEAD' ? undefined : body);
  });
  return new Promise((resolvePromise, reject) => {
    server.once('error', reject);
    server.listen(port, '127.0.0.1', () => {
      resolvePromise({ server, url: `http://127.0.0.1:${server.address().port}/` });
    });
  });
}

// Run as a program (not imported)? Bazel's runfiles are symlinks and Node names a module by its
// real path, so compare real paths.
if (process.argv[1] && realpathSync(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const args = process.argv.slice(2);
  let port = 8765;
  const roots = [];
  for (let i = 0; i < args.length; ++i) {
    if (args[i] === '--port') port = Number(args[++i]);
    else roots.push(args[i]);
  }
  if (!Number.isInteger(port) || port < 0 || port > 65535 || roots.length === 0) {
    console.error('usage: node serve.mjs [--port N] ROOT...');
    process.exit(2);
  }
  startServer(roots, port).then(
    ({ url }) => console.log(`schedule explorer: open ${url}  (Ctrl-C stops it)`),
    (e) => {
      console.error(`serve.mjs: cannot listen on 127.0.0.1:${port}: ${e.message}` +
                    (e.code === 'EADDRINUSE' ? ' (in use: pass --port N, or 0 for any free port)' : ''));
      process.exit(1);
    });
}
