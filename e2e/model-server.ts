// A second origin serving a model folder, as a model host would (with CORS so the app may fetch from it),
// counting the requests it answers so tests can tell a cached load from a download.
import { readFileSync, existsSync } from "node:fs";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { join } from "node:path";

export interface ModelServer {
  url: string;
  hits: string[];
  close(): Promise<void>;
}

export async function serveModel(dir: string, prefix = "/m/webart-tiny/"): Promise<ModelServer> {
  const hits: string[] = [];
  const server = createServer((req, res) => {
    const path = (req.url ?? "").split("?")[0];
    hits.push(path);
    const file = path.startsWith(prefix) ? join(dir, decodeURIComponent(path.slice(prefix.length))) : "";
    const headers = { "access-control-allow-origin": "*", "access-control-allow-headers": "*" };
    if (req.method === "OPTIONS") {
      res.writeHead(204, headers);
      return res.end();
    }
    if (!file || !existsSync(file) || file.includes("..")) {
      res.writeHead(404, headers);
      return res.end("not found");
    }
    const body = readFileSync(file);
    res.writeHead(200, {
      ...headers,
      "content-type": "application/octet-stream",
      "content-length": String(body.length),
    });
    res.end(body);
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}${prefix}`,
    hits,
    close: () => new Promise((r) => (server.closeAllConnections(), server.close(() => r()))),
  };
}
