// A RULER judge for the e2e tests: a real OpenAI-compatible HTTP endpoint on 127.0.0.1 (node:http, with CORS
// so the page's worker may call it) that scores the trajectories it is asked about, spread over [0, 1], and
// records each request. Two model names behave as judges that cannot serve RULER do: "no-schema" refuses
// response_format json_schema (HTTP 400), "prose" ignores it and answers in words.
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";

export interface Judge {
  baseURL: string;
  requests: { model: string; authorization: string | undefined; ids: string[] }[];
  close(): Promise<void>;
}

const CORS = {
  "access-control-allow-origin": "*",
  "access-control-allow-headers": "*",
  "access-control-allow-methods": "POST, OPTIONS",
};

export async function startJudge(): Promise<Judge> {
  const requests: Judge["requests"] = [];
  const server = createServer((req, res) => {
    if (req.method === "OPTIONS") {
      res.writeHead(204, CORS);
      return res.end();
    }
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      const body = JSON.parse(Buffer.concat(chunks).toString("utf8"));
      const ids: string[] =
        body.response_format.json_schema.schema.properties.scores.items.properties.trajectory_id.enum;
      requests.push({ model: body.model, authorization: req.headers.authorization, ids });
      if (body.model === "no-schema") {
        res.writeHead(400, { "content-type": "application/json", ...CORS });
        return res.end(
          JSON.stringify({ error: { message: "response_format type json_schema is not supported by this server" } }),
        );
      }
      const scores = ids.map((id, i) => ({
        trajectory_id: id,
        explanation: `judged ${i + 1} of ${ids.length}`,
        score: ids.length > 1 ? i / (ids.length - 1) : 0.5,
      }));
      res.writeHead(200, { "content-type": "application/json", ...CORS });
      res.end(
        JSON.stringify({
          id: "chatcmpl-judge",
          object: "chat.completion",
          created: Math.floor(Date.now() / 1000),
          model: body.model,
          choices: [
            {
              index: 0,
              message: {
                role: "assistant",
                content: body.model === "prose" ? "The second answer is better." : JSON.stringify({ scores }),
                refusal: null,
              },
              finish_reason: "stop",
              logprobs: null,
            },
          ],
          usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 },
        }),
      );
    });
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const { port } = server.address() as AddressInfo;
  return { baseURL: `http://127.0.0.1:${port}/v1`, requests, close: () => new Promise((r) => server.close(() => r())) };
}
