// RemoteBackend: the Backend interface over HTTP to `webart serve` on a machine with a GPU. Only fetch
// is used, so it runs in Node and in browsers; swapping it for LocalBackend is the one-line change.
// Routes and their JSON are documented in packages/webart/src/cli/serve/routes.ts.
import OpenAI from "openai";
import {
  specOf,
  logTargetOf,
  type Backend,
  type LogTarget,
  type ModelRef,
  type ModelSpec,
  type TrainResult,
  type TrainSftResult,
} from "./backend.ts";
import type { TrainConfig } from "./train-config.ts";
import { resolveSftConfig, type TrainSftConfig } from "./train-sft.ts";
import { checkRewards, Trajectory, type TrajectoryGroup, type TrajectoryLike } from "./trajectories.ts";

type Fetch = (input: string | URL | Request, init?: RequestInit) => Promise<Response>;

export interface RemoteBackendOptions {
  /** Sent as `Authorization: Bearer <apiKey>` (the server's --api-key-env). */
  apiKey?: string;
  /** A fetch to use instead of the global one (e.g. with a proxy agent). */
  fetch?: Fetch;
  /** The openai client's per-request timeout in ms (default 20 min). */
  timeoutMs?: number;
  /** The openai client's retries (default 2); they also cover 503 + Retry-After while a step trains. */
  maxRetries?: number;
}

/** An error answer from the server, with OpenAI's fields. */
export class RemoteError extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly code: string | null = null,
    readonly param: string | null = null,
  ) {
    super(message);
    this.name = "RemoteError";
  }
}

const ADAPTER_FILES = ["adapter_model.safetensors", "adapter_config.json"] as const;

export class RemoteBackend implements Backend {
  /** The server's root, e.g. http://gpu-box:8000 (a trailing /v1 is dropped). */
  readonly baseURL: string;
  private readonly fetch: Fetch;
  private specs = new Map<string, ModelSpec>();
  /** Registrations under way after the server forgot a model, shared by the calls that found it gone. */
  private reregistering = new Map<string, Promise<unknown>>();
  private client?: OpenAI;

  constructor(
    baseURL: string,
    private opts: RemoteBackendOptions = {},
  ) {
    this.baseURL = baseURL.replace(/\/+$/, "").replace(/\/v1$/, "");
    // Called through a closure: browsers refuse fetch called as a method of another object.
    this.fetch = opts.fetch ?? ((input, init) => globalThis.fetch(input, init));
  }

  private route(spec: ModelSpec, tail: string): string {
    return `/v1/webart/models/${encodeURIComponent(spec.project)}/${encodeURIComponent(spec.name)}/${tail}`;
  }

  /** One request; error answers throw RemoteError. `raw`: a successful answer is returned as is (file bytes). */
  private async send(method: string, path: string, body?: unknown, raw = false): Promise<Response> {
    const headers: Record<string, string> = {};
    if (this.opts.apiKey) headers.authorization = `Bearer ${this.opts.apiKey}`;
    if (body !== undefined) headers["content-type"] = "application/json";
    const r = await this.fetch(`${this.baseURL}${path}`, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    if (r.ok && raw) return r;
    // JSON answers; a long train step's answer is a 200 padded with spaces, carrying { error } if it failed.
    const text = await r.text();
    let j: { error?: { message?: string; code?: string | null; param?: string | null } } | null = null;
    try {
      j = JSON.parse(text);
    } catch {
      if (r.ok)
        throw new RemoteError(r.status, `${method} ${path}: the server's answer is not JSON: ${text.slice(0, 200)}`);
    }
    if (!r.ok || j?.error) {
      const e = j?.error;
      throw new RemoteError(
        r.ok ? 500 : r.status,
        `${method} ${path}: ${e?.message ?? `HTTP ${r.status} ${text.slice(0, 200)}`}`,
        e?.code ?? null,
        e?.param ?? null,
      );
    }
    return new Response(text, { status: r.status, headers: r.headers });
  }

  /** A model route; when the server lost the model (it restarted), registers it again and retries once. */
  private async call<T>(spec: ModelSpec, method: string, tail: string, body?: unknown, raw = false): Promise<T> {
    const go = async () => {
      const r = await this.send(method, this.route(spec, tail), body, raw);
      return (raw ? r : await r.json()) as T;
    };
    try {
      return await go();
    } catch (e) {
      if (!(e instanceof RemoteError && e.code === "model_not_registered" && this.specs.has(this.key(spec)))) throw e;
      await this.registerAgain(spec);
      return go();
    }
  }

  /** Registers a model the server forgot (it restarted), once for all the calls that found it gone at once. */
  private registerAgain(spec: ModelSpec): Promise<unknown> {
    const k = this.key(spec);
    let p = this.reregistering.get(k);
    if (!p) {
      p = this.register(spec).finally(() => this.reregistering.delete(k));
      this.reregistering.set(k, p);
    }
    return p;
  }

  /**
   * The openai client's fetch: a request naming a model this backend registered that the server does not know
   * (404 model_not_found: it restarted) registers the model again, resuming at its latest checkpoint, and is sent
   * once more. If registering fails, the first answer stands.
   */
  private openaiFetch: Fetch = async (input, init) => {
    const r = await this.fetch(input, init);
    if (r.status !== 404 || typeof init?.body !== "string") return r;
    let name: unknown;
    try {
      name = (JSON.parse(init.body) as { model?: unknown }).model;
    } catch {
      return r;
    }
    const spec = [...this.specs.values()].filter((s) => s.name === name).pop();
    if (!spec) return r;
    const code = await r
      .clone()
      .json()
      .then(
        (j: { error?: { code?: unknown } }) => j?.error?.code,
        () => null,
      );
    if (code !== "model_not_found") return r;
    const registered = await this.registerAgain(spec).then(
      () => true,
      () => false,
    );
    return registered ? this.fetch(input, init) : r;
  };

  private key(spec: ModelSpec): string {
    return `${spec.project}/${spec.name}`;
  }

  async register(spec: ModelSpec): Promise<{ step: number }> {
    const r = await this.send("POST", "/v1/webart/models", {
      name: spec.name,
      project: spec.project,
      baseModel: spec.baseModel,
      lora: spec.lora,
      seed: spec.seed,
    });
    this.specs.set(this.key(spec), spec);
    return (await r.json()) as { step: number };
  }

  /** An openai client for the server's /v1 (chat requests name the model, so one client serves them all). */
  openaiClient(_spec?: ModelSpec): OpenAI {
    return (this.client ??= new OpenAI({
      baseURL: `${this.baseURL}/v1`,
      apiKey: this.opts.apiKey ?? "webart-no-key",
      fetch: this.openaiFetch,
      timeout: this.opts.timeoutMs ?? 20 * 60 * 1000,
      maxRetries: this.opts.maxRetries ?? 2,
      dangerouslyAllowBrowser: true,
    }));
  }

  async getStep(spec: ModelSpec): Promise<number> {
    return (await this.call<{ step: number }>(spec, "GET", "step")).step;
  }

  async train(model: ModelRef, groups: TrajectoryGroup[], config: Partial<TrainConfig> = {}): Promise<TrainResult> {
    checkRewards(groups, "train");
    return this.call<TrainResult>(specOf(model), "POST", "train", { groups, config });
  }

  async trainSft(
    model: ModelRef,
    trajectories: Iterable<TrajectoryLike>,
    config: Partial<TrainSftConfig> = {},
  ): Promise<TrainSftResult> {
    resolveSftConfig(config); // a bad key or value fails here, before the trajectories are sent
    const list = [...trajectories].map((t) => (t instanceof Trajectory ? t : new Trajectory(t)));
    return this.call<TrainSftResult>(specOf(model), "POST", "train_sft", { trajectories: list, config });
  }

  async log(
    model: LogTarget,
    groups: TrajectoryGroup[],
    opts: { split?: string; metrics?: Record<string, number>; step?: number } = {},
  ): Promise<void> {
    const { spec, name, project } = logTargetOf(model);
    if (!spec)
      throw new Error(
        `log: "${name}" (project "${project}") is not a TrainableModel; the server keeps runs of the models it trains only ` +
          `(log a prompted model's trajectories with a LocalBackend)`,
      );
    checkRewards(groups, "log");
    await this.call(spec, "POST", "log", {
      groups,
      split: opts.split ?? "val",
      metrics: opts.metrics ?? {},
      ...(opts.step !== undefined ? { step: opts.step } : {}),
    });
  }

  async listCheckpoints(spec: ModelSpec): Promise<number[]> {
    return (await this.call<{ steps: number[] }>(spec, "GET", "checkpoints")).steps;
  }

  async deleteCheckpoints(spec: ModelSpec, steps: number[]): Promise<void> {
    await this.call(spec, "DELETE", "checkpoints", { steps });
  }

  async history(spec: ModelSpec): Promise<Record<string, unknown>[]> {
    return (await this.call<{ data: Record<string, unknown>[] }>(spec, "GET", "history")).data;
  }

  /** Downloads a checkpoint's PEFT files (the latest when step is omitted; both files from the same step). */
  async adapterFiles(spec: ModelSpec, step?: number): Promise<{ step: number; files: Record<string, Uint8Array> }> {
    const files: Record<string, Uint8Array> = {};
    let at: string = step === undefined ? "latest" : String(step);
    let s = step ?? -1;
    for (const f of ADAPTER_FILES) {
      const r = await this.call<Response>(spec, "GET", `checkpoints/${at}/${f}`, undefined, true);
      s = Number(r.headers.get("x-webart-step") ?? s);
      at = String(s);
      files[f] = new Uint8Array(await r.arrayBuffer());
    }
    return { step: s, files };
  }

  async close(): Promise<void> {
    this.specs.clear();
  }
}
