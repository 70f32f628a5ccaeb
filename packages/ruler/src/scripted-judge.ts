// Test helper: a real HTTP judge on 127.0.0.1 (node:http) that answers each chat request as a
// script says (a reply text, an HTTP error, a hang) and records every request it received.
import { createServer, type IncomingHttpHeaders, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";

export type Step =
  | { content: string | null; finishReason?: string; refusal?: string }
  | { status: number; body?: unknown; headers?: Record<string, string> }
  /** Never answer (the client must time out). */
  | { hang: true }
  /** Send the status line and headers, then never finish the body. */
  | { stallBody: true };

export interface JudgeRequest {
  url: string;
  headers: IncomingHttpHeaders;
  body: {
    model: string;
    messages: { role: string; content: string }[];
    response_format?: {
      type: string;
      json_schema?: { name: string; strict?: boolean; schema: Record<string, unknown> };
    };
    [key: string]: unknown;
  };
}

export interface ScriptedJudge {
  baseURL: string;
  requests: JudgeRequest[];
  close(): Promise<void>;
}

/** The ids the request asks to be scored, read from the schema it sent. */
export function requestedIds(req: JudgeRequest): string[] {
  const schema = req.body.response_format?.json_schema?.schema as {
    properties: { scores: { items: { properties: { trajectory_id: { enum: string[] } } } } };
  };
  return schema.properties.scores.items.properties.trajectory_id.enum;
}

function completion(content: string | null, finishReason: string, refusal: string | null) {
  return {
    id: "chatcmpl-scripted",
    object: "chat.completion",
    created: Math.floor(Date.now() / 1000),
    model: "scripted-judge",
    choices: [
      { index: 0, message: { role: "assistant", content, refusal }, finish_reason: finishReason, logprobs: null },
    ],
    usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 },
  };
}

/** Steps taken in order; a request past the end of the script gets a 418 so tests see it. */
export function script(steps: Step[]): (req: JudgeRequest, i: number) => Step {
  return (_req, i) =>
    steps[i] ?? { status: 418, body: { error: { message: `script has only ${steps.length} steps` } } };
}

export async function startJudge(respond: (req: JudgeRequest, i: number) => Step): Promise<ScriptedJudge> {
  const requests: JudgeRequest[] = [];
  const send = (res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}) => {
    res.writeHead(status, { "content-type": "application/json", ...headers });
    res.end(JSON.stringify(body));
  };
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      const r: JudgeRequest = {
        url: req.url ?? "",
        headers: req.headers,
        body: JSON.parse(Buffer.concat(chunks).toString("utf8") || "{}"),
      };
      const i = requests.push(r) - 1;
      const step = respond(r, i);
      if ("hang" in step) return;
      if ("stallBody" in step) {
        res.writeHead(200, { "content-type": "application/json" });
        res.write('{"id":');
        return;
      }
      if ("status" in step)
        return send(res, step.status, step.body ?? { error: { message: "scripted error" } }, step.headers);
      send(res, 200, completion(step.content, step.finishReason ?? "stop", step.refusal ?? null));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    baseURL: `http://127.0.0.1:${port}/v1`,
    requests,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
