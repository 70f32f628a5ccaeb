// The training routes RemoteBackend uses, over a LocalBackend that owns the GPU. All JSON (OpenAI-style
// errors) except adapter downloads, which are the files' bytes.
//
//   GET    /v1/webart/status                               { model, training: [names], models: [{ project, name, step }] }
//   POST   /v1/webart/models                               { name, project, baseModel, lora?, seed? } -> { step }
//   GET    /v1/webart/models/{project}/{name}/step         -> { step }
//   POST   /v1/webart/models/{project}/{name}/train        { groups: [TrajectoryGroup JSON], config? } -> { step, metrics, checkpointPath }
//   POST   /v1/webart/models/{project}/{name}/train_sft    { trajectories: [Trajectory JSON], config? } -> { step, metrics, checkpointPath }
//   POST   /v1/webart/models/{project}/{name}/log          { groups, split?, metrics?, step? } -> { step }
//   GET    /v1/webart/models/{project}/{name}/history      -> { data: [rows] }
//   GET    /v1/webart/models/{project}/{name}/checkpoints  -> { steps }
//   DELETE /v1/webart/models/{project}/{name}/checkpoints  { steps } -> { deleted }
//   GET    /v1/webart/models/{project}/{name}/checkpoints/{step|latest}/{adapter_config.json|adapter_model.safetensors}
//          -> the file's bytes, with the step in `x-webart-step`
//
// Names (project, model, split) are letters, digits, '.', '_', '-', not starting with '.' or '-': they
// become folder names under the runs directory, so nothing else gets near the file system. A route on a
// model the server does not know answers 404 with code "model_not_registered" (e.g. after a restart);
// RemoteBackend then registers again (resuming at the latest checkpoint) and retries.
//
// A train (or train_sft) request answers when the step is done. Steps longer than `commitMs` get their 200 headers
// early and a space every `heartbeatMs` until the JSON (or { error }) follows, so no client or proxy
// times out on a long step; the body parses as JSON either way.
import type { IncomingMessage, ServerResponse } from "node:http";
import {
  ApiError,
  badRequest,
  resolveSftConfig,
  resolveTrainConfig,
  Trajectory,
  TrajectoryGroup,
  validateLoraConfig,
  type LocalBackend,
  type ModelSpec,
  type ServedModel,
  type TrainConfig,
  type TrainSftConfig,
} from "@webart/engine";
import type { TrainGate } from "./gate.ts";
import { parseJson, readBody, sendJson } from "./http.ts";

export const NAME_RE = /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/;
const ADAPTER_FILES = ["adapter_config.json", "adapter_model.safetensors"];

export interface RoutesContext {
  backend: LocalBackend;
  /** The server's base model: the source it was loaded from (--model) and the name it is served under. */
  base: { source: string; name: string };
  gate: TrainGate;
  isClosing(): boolean;
  limits: { train: number; other: number };
  commitMs: number;
  heartbeatMs: number;
  log: (line: string) => void;
}

const isObj = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);

function checkName(v: unknown, param: string): string {
  if (typeof v !== "string" || !NAME_RE.test(v)) {
    throw new ApiError(
      400,
      `${param}: ${JSON.stringify(v)} is not allowed: use letters, digits, '.', '_' and '-' (not starting with '.' or '-'), at most 128`,
      param,
      "invalid_name",
    );
  }
  return v;
}

/** Groups from their JSON (ART's shape), checked enough that errors name the bad field. */
function parseGroups(v: unknown): TrajectoryGroup[] {
  if (!Array.isArray(v)) throw badRequest(`groups: expected an array of trajectory groups, got ${typeof v}`, "groups");
  return v.map((g, gi) => {
    if (!isObj(g) || !Array.isArray(g.trajectories))
      throw badRequest(`groups[${gi}].trajectories: expected an array`, "groups");
    if (g.exceptions !== undefined && !Array.isArray(g.exceptions))
      throw badRequest(`groups[${gi}].exceptions: expected an array`, "groups");
    g.trajectories.forEach((t, ti) => {
      const at = `groups[${gi}].trajectories[${ti}]`;
      if (!isObj(t) || !Array.isArray(t.messages_and_choices))
        throw badRequest(`${at}.messages_and_choices: expected an array`, "groups");
      if (typeof t.reward !== "number" || !Number.isFinite(t.reward))
        throw badRequest(`${at}.reward: expected a finite number, got ${JSON.stringify(t.reward)}`, "groups");
      if (t.metrics !== undefined && !isObj(t.metrics)) throw badRequest(`${at}.metrics: expected an object`, "groups");
    });
    return TrajectoryGroup.fromJSON(g);
  });
}

/** Refuses a body with a field outside `known`, naming it. */
function onlyFields(body: Record<string, unknown>, known: string[]): void {
  for (const k of Object.keys(body)) if (!known.includes(k)) throw badRequest(`unknown field "${k}"`, k);
}

/** A request's optional config object, checked by `resolve` (whose message becomes a 400 on "config"). */
function parseConfig<T>(v: unknown, resolve: (c: T) => unknown): T {
  if (v !== undefined && !isObj(v)) throw badRequest("config: expected an object", "config");
  const config = (v ?? {}) as T;
  try {
    resolve(config);
  } catch (e) {
    throw badRequest((e as Error).message, "config");
  }
  return config;
}

function parseMetrics(v: unknown): Record<string, number> {
  if (v === undefined || v === null) return {};
  if (!isObj(v)) throw badRequest("metrics: expected an object of numbers", "metrics");
  for (const [k, x] of Object.entries(v))
    if (typeof x !== "number" || !Number.isFinite(x))
      throw badRequest(`metrics.${k}: expected a finite number`, "metrics");
  return v as Record<string, number>;
}

/** LocalBackend's errors about the caller's input become 4xx; anything else stays a 500. */
function asApiError(e: unknown): unknown {
  if (e instanceof ApiError || !(e instanceof Error)) return e;
  if (/^(train|trainSft|TrainConfig|TrainSftConfig|deleteCheckpoints|lora)[.:]/.test(e.message))
    return badRequest(e.message);
  if (/this run was created with/.test(e.message)) return new ApiError(409, e.message, null, "conflict");
  if (/does not exist|is missing/.test(e.message)) return new ApiError(404, e.message, null, "not_found");
  return e;
}

export class TrainingRoutes {
  /** Registered models by "project/name". */
  private specs = new Map<string, ModelSpec>();
  private registering: Promise<unknown> = Promise.resolve();

  constructor(private ctx: RoutesContext) {}

  /** Resolves once no registration is loading a model (for shutdown). */
  settled(): Promise<unknown> {
    return this.registering;
  }

  /** The registered models' engines, as the chat handler serves them. */
  served(): ServedModel[] {
    return [...this.specs.values()].flatMap((s) => this.ctx.backend.engine(s).served);
  }

  private spec(project: string, name: string): ModelSpec {
    const s = this.specs.get(`${project}/${name}`);
    if (!s) {
      throw new ApiError(
        404,
        `model "${name}" (project "${project}") is not registered on this server: POST /v1/webart/models first`,
        "name",
        "model_not_registered",
      );
    }
    return s;
  }

  private async json(req: IncomingMessage, limit: number): Promise<Record<string, unknown>> {
    const body = parseJson(await readBody(req, limit));
    if (!isObj(body)) throw badRequest("the request body must be a JSON object");
    return body;
  }

  /** Handles /v1/webart/{...segs}; segs are decoded path segments (already free of '/', '.' and '..'). */
  async handle(
    req: IncomingMessage,
    res: ServerResponse,
    segs: string[],
    headers: Record<string, string>,
  ): Promise<void> {
    const { ctx } = this;
    const m = req.method ?? "GET";
    const send = (body: unknown) => sendJson(res, 200, body, headers);
    const route = `${m} /v1/webart/${segs.join("/")}`;
    const notAllowed = () => new ApiError(405, `${route}: method not allowed`, null, "method_not_allowed");
    if (segs.length === 1 && segs[0] === "status") {
      if (m !== "GET") throw notAllowed();
      const models = await Promise.all(
        [...this.specs.values()].map(async (s) => ({
          project: s.project,
          name: s.name,
          step: await ctx.backend.getStep(s),
        })),
      );
      return send({ model: ctx.base.name, training: ctx.gate.training(), models });
    }
    if (segs[0] !== "models") throw new ApiError(404, `Unknown route ${route}`, null, "unknown_url");
    if (segs.length === 1) {
      if (m !== "POST") throw notAllowed();
      return send(await this.register(await this.json(req, ctx.limits.other)));
    }
    if (segs.length < 4) throw new ApiError(404, `Unknown route ${route}`, null, "unknown_url");
    const spec = this.spec(checkName(segs[1], "project"), checkName(segs[2], "name"));
    const [what, ...rest] = segs.slice(3);
    const key = `${what}${rest.length ? `/${rest.length}` : ""} ${m}`;
    switch (key) {
      case "step GET":
        return send({ step: await ctx.backend.getStep(spec) });
      case "train POST":
        return this.train(res, spec, await this.json(req, ctx.limits.train), headers);
      case "train_sft POST":
        return this.trainSft(res, spec, await this.json(req, ctx.limits.train), headers);
      case "log POST": {
        const body = await this.json(req, ctx.limits.train);
        onlyFields(body, ["groups", "split", "metrics", "step"]);
        const split = body.split === undefined ? "val" : checkName(body.split, "split");
        const step = body.step;
        if (step !== undefined && !(Number.isInteger(step) && (step as number) >= 0))
          throw badRequest(`step: expected an integer >= 0, got ${JSON.stringify(step)}`, "step");
        await ctx.backend.log(spec, parseGroups(body.groups), {
          split,
          metrics: parseMetrics(body.metrics),
          step: step as number | undefined,
        });
        return send({ step: await ctx.backend.getStep(spec) });
      }
      case "history GET":
        return send({ data: await ctx.backend.history(spec) });
      case "checkpoints GET":
        return send({ steps: await ctx.backend.listCheckpoints(spec) });
      case "checkpoints DELETE": {
        const body = await this.json(req, ctx.limits.other);
        const steps = body.steps;
        if (!Array.isArray(steps) || !steps.every((s) => Number.isInteger(s) && s >= 0))
          throw badRequest("steps: expected an array of step numbers", "steps");
        await ctx.backend.deleteCheckpoints(spec, steps as number[]).catch((e) => Promise.reject(asApiError(e)));
        return send({ deleted: steps });
      }
      case "checkpoints/2 GET":
        return this.adapterFile(res, spec, rest[0], rest[1], headers);
    }
    if (!rest.length && ["step", "train", "train_sft", "log", "history", "checkpoints"].includes(what))
      throw notAllowed();
    throw new ApiError(404, `Unknown route ${route}`, null, "unknown_url");
  }

  private async register(body: Record<string, unknown>): Promise<{ step: number }> {
    const { ctx } = this;
    const name = checkName(body.name, "name");
    const project = checkName(body.project, "project");
    onlyFields(body, ["name", "project", "baseModel", "lora", "seed"]);
    // The server's source, its served name, or a repo id / path ending in that name.
    const bm = body.baseModel;
    if (
      typeof bm !== "string" ||
      (bm !== ctx.base.source && bm !== ctx.base.name && bm.split(/[\\/]/).pop() !== ctx.base.name)
    ) {
      throw badRequest(
        `baseModel: this server serves base model "${ctx.base.source}" (as "${ctx.base.name}"), not ${JSON.stringify(body.baseModel)}`,
        "baseModel",
      );
    }
    if (body.seed !== undefined && !Number.isInteger(body.seed))
      throw badRequest(`seed: expected an integer, got ${JSON.stringify(body.seed)}`, "seed");
    if (body.lora !== undefined && !isObj(body.lora))
      throw badRequest("lora: expected an object { rank, alpha, targets }", "lora");
    let lora;
    try {
      lora = validateLoraConfig((body.lora ?? {}) as never);
    } catch (e) {
      throw badRequest((e as Error).message, "lora");
    }
    if (name === ctx.base.name)
      throw new ApiError(
        409,
        `name: "${name}" is the base model's name on this server; pick another`,
        "name",
        "conflict",
      );
    const known = this.specs.get(`${project}/${name}`);
    if (
      known &&
      (JSON.stringify(known.lora) !== JSON.stringify(lora) || known.seed !== ((body.seed as number | undefined) ?? 0))
    ) {
      throw new ApiError(
        409,
        `model "${name}" (project "${project}") is registered with LoRA ${JSON.stringify(known.lora)} and seed ${known.seed}; register it with the same settings, or use another name`,
        "lora",
        "conflict",
      );
    }
    for (const s of this.specs.values()) {
      if (s.name === name && s.project !== project)
        throw new ApiError(
          409,
          `name: "${name}" is already served for project "${s.project}"; chat requests could not tell them apart`,
          "name",
          "conflict",
        );
    }
    const spec: ModelSpec = {
      name,
      project,
      baseModel: ctx.base.source,
      lora,
      seed: (body.seed as number | undefined) ?? 0,
    };
    // One registration at a time: two for the same run would load it twice.
    const p = this.registering.then(async () => {
      const r = await ctx.backend.register(spec).catch((e) => Promise.reject(asApiError(e)));
      this.specs.set(`${project}/${name}`, spec);
      return r;
    });
    this.registering = p.catch(() => {});
    return p;
  }

  private async train(
    res: ServerResponse,
    spec: ModelSpec,
    body: Record<string, unknown>,
    headers: Record<string, string>,
  ): Promise<void> {
    const { ctx } = this;
    onlyFields(body, ["groups", "config"]);
    const groups = parseGroups(body.groups);
    const config = parseConfig<Partial<TrainConfig>>(body.config, resolveTrainConfig);
    return this.longStep(
      res,
      headers,
      spec,
      () => ctx.backend.train(spec, groups, config),
      ({ step, metrics: m }) =>
        `train ${spec.project}/${spec.name}: step ${step}, reward ${m.reward.toFixed(3)}, loss ${m.loss.toFixed(4)}, ${m.step_seconds.toFixed(1)} s`,
    );
  }

  private async trainSft(
    res: ServerResponse,
    spec: ModelSpec,
    body: Record<string, unknown>,
    headers: Record<string, string>,
  ): Promise<void> {
    const { ctx } = this;
    onlyFields(body, ["trajectories", "config"]);
    if (!Array.isArray(body.trajectories))
      throw badRequest(
        `trajectories: expected an array of trajectories, got ${typeof body.trajectories}`,
        "trajectories",
      );
    const trajectories = body.trajectories.map((t, ti) => {
      if (!isObj(t) || !Array.isArray(t.messages_and_choices))
        throw badRequest(`trajectories[${ti}].messages_and_choices: expected an array`, "trajectories");
      return Trajectory.fromJSON(t);
    });
    const config = parseConfig<Partial<TrainSftConfig>>(body.config, resolveSftConfig);
    return this.longStep(
      res,
      headers,
      spec,
      () => ctx.backend.trainSft(spec, trajectories, config),
      ({ step, metrics: m }) =>
        `train_sft ${spec.project}/${spec.name}: step ${step}, loss ${m.loss.toFixed(4)}, ${m.num_batches} batches, ${m.step_seconds.toFixed(1)} s`,
    );
  }

  /**
   * Runs a training call of `spec`'s run through the gate, logs `line` of its result, and answers with it: at once
   * when it ends within commitMs, otherwise 200 headers early, a space every heartbeatMs, then the JSON (or
   * { error }).
   */
  private async longStep<T>(
    res: ServerResponse,
    headers: Record<string, string>,
    spec: ModelSpec,
    work: () => Promise<T>,
    line: (r: T) => string,
  ): Promise<void> {
    const { ctx } = this;
    if (ctx.isClosing()) throw new ApiError(503, "the server is shutting down", null, "shutting_down");
    const step = ctx.gate.run(spec.name, async () => {
      if (ctx.isClosing()) throw new ApiError(503, "the server is shutting down", null, "shutting_down");
      const r = await work();
      ctx.log(line(r));
      return r;
    });
    let timer: ReturnType<typeof setTimeout> | undefined;
    const early = await Promise.race([
      step.then(
        (v) => ({ v }),
        (e: unknown) => ({ e }),
      ),
      new Promise<null>((r) => (timer = setTimeout(() => r(null), ctx.commitMs))),
    ]);
    clearTimeout(timer);
    if (early && "e" in early) throw asApiError(early.e);
    if (early) return sendJson(res, 200, early.v, headers);
    res.writeHead(200, { "content-type": "application/json", ...headers });
    const beat = setInterval(() => !res.destroyed && res.write(" "), ctx.heartbeatMs);
    try {
      res.end(JSON.stringify(await step));
    } catch (e) {
      const err = asApiError(e);
      res.end(JSON.stringify((err instanceof ApiError ? err : new ApiError(500, (err as Error).message)).toJSON()));
    } finally {
      clearInterval(beat);
    }
  }

  private async adapterFile(
    res: ServerResponse,
    spec: ModelSpec,
    stepSeg: string,
    file: string,
    headers: Record<string, string>,
  ): Promise<void> {
    if (stepSeg !== "latest" && !/^\d{1,9}$/.test(stepSeg))
      throw badRequest(`step: "${stepSeg}" is not a step number or "latest"`, "step");
    if (!ADAPTER_FILES.includes(file))
      throw new ApiError(
        404,
        `no file "${file}" in a checkpoint (files: ${ADAPTER_FILES.join(", ")})`,
        "file",
        "not_found",
      );
    const step = stepSeg === "latest" ? undefined : Number(stepSeg);
    if (step !== undefined && !(await this.ctx.backend.listCheckpoints(spec)).includes(step)) {
      throw new ApiError(404, `model "${spec.name}" has no checkpoint at step ${step}`, "step", "not_found");
    }
    const got = await this.ctx.backend.adapterFiles(spec, step).catch((e) => Promise.reject(asApiError(e)));
    const bytes = got.files[file];
    res.writeHead(200, {
      "content-type": file.endsWith(".json") ? "application/json" : "application/octet-stream",
      "content-length": String(bytes.byteLength),
      "x-webart-step": String(got.step),
      ...headers,
    });
    res.end(bytes);
  }
}
