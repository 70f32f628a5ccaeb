// rulerScoreGroup against a scripted judge over real HTTP: rewards replaced, old reward kept,
// explanations logged, failures swallowed to null, and use as gatherTrajectoryGroups' afterEach.
import { afterEach, describe, expect, it } from "vitest";
import { join } from "node:path";
import {
  clientForHandler,
  Engine,
  gatherTrajectoryGroups,
  Trajectory,
  TrajectoryGroup,
  type Message,
} from "@webart/engine";
import { rulerScoreGroup, type RulerGroupOptions } from "./group.ts";
import { RulerError } from "./ruler.ts";
import { requestedIds, startJudge, type JudgeRequest, type ScriptedJudge, type Step } from "./scripted-judge.ts";

const sys: Message = { role: "system", content: "Win at tic-tac-toe." };
const user = (content: string): Message => ({ role: "user", content });
const say = (content: string): Message => ({ role: "assistant", content });

/** The judge scores by the last assistant move it sees, so the expected score of each trajectory is known. */
const moveScore: Record<string, number> = { B2: 0.9, A1: 0.4, C3: 0.1 };
function scoreByMove(req: JudgeRequest): Step {
  const prompt = req.body.messages[1].content;
  const ids = requestedIds(req);
  const entries = ids.map((id) => {
    const block = prompt.split(`<trajectory id="${id}">\n`)[1].split("\n</trajectory>")[0];
    const moves = (JSON.parse(block) as { role: string; content: string }[]).filter((m) => m.role === "assistant");
    const move = moves[moves.length - 1].content;
    return { trajectory_id: id, explanation: `played ${move}`, score: moveScore[move] };
  });
  return { content: JSON.stringify({ scores: entries.reverse() }) };
}

let judge: ScriptedJudge | undefined;
afterEach(async () => {
  await judge?.close();
  judge = undefined;
});

const opts = (j: ScriptedJudge, more: Partial<RulerGroupOptions> = {}): RulerGroupOptions => ({
  baseURL: j.baseURL,
  apiKey: "none",
  model: "judge",
  backoffMs: 1,
  timeoutMs: 2000,
  ...more,
});

const game = (move: string, reward: number) =>
  new Trajectory({
    messagesAndChoices: [sys, user("Board empty. Your move."), say(move)],
    reward,
    metrics: { moves: 1 },
    metadata: { scenario: "s1" },
    logs: [`rollout ${move}`],
  });

describe("rulerScoreGroup", () => {
  it("replaces rewards by the judge's scores, keeps the old reward and logs the explanation", async () => {
    judge = await startJudge(scoreByMove);
    const group = new TrajectoryGroup(
      [game("A1", 1), game("B2", 0), game("C3", 0.5)],
      [{ type: "Error", message: "one rollout crashed", traceback: "" }],
    );
    const before = JSON.stringify(group.toJSON());
    const out = await rulerScoreGroup(group, opts(judge));
    expect(out).not.toBeNull();
    expect(out!.trajectories.map((t) => t.reward)).toEqual(["A1", "B2", "C3"].map((m) => moveScore[m]));
    out!.trajectories.forEach((t, i) => {
      const old = group.trajectories[i];
      expect(t.metrics).toEqual({ moves: 1, independent_reward: old.reward, ruler_score: t.reward });
      expect(t.logs).toEqual([
        ...old.logs,
        `RULER score ${t.reward}: played ${(old.messagesAndChoices[2] as { content: string }).content}`,
      ]);
      expect(t.metadata).toEqual(old.metadata);
      expect(t.messagesAndChoices).toEqual(old.messagesAndChoices);
    });
    expect(out!.exceptions).toEqual(group.exceptions);
    expect(JSON.stringify(group.toJSON())).toBe(before); // the input group is untouched
    expect(judge.requests).toHaveLength(1);
    expect(judge.requests[0].body.messages[1].content).toContain("<shared_context>");
  });

  it("scores rollouts that set no reward of their own: no independent_reward metric, and they then train", async () => {
    judge = await startJudge(scoreByMove);
    const unscored = ["A1", "B2"].map((m) => new Trajectory({ messagesAndChoices: game(m, 0).messagesAndChoices }));
    const out = await rulerScoreGroup(new TrajectoryGroup(unscored), opts(judge));
    expect(out!.trajectories.map((t) => t.reward)).toEqual([moveScore.A1, moveScore.B2]);
    expect(out!.trajectories.map((t) => t.metrics)).toEqual([
      { ruler_score: moveScore.A1 },
      { ruler_score: moveScore.B2 },
    ]);
  });

  it("shows the trajectories' tools to the judge", async () => {
    judge = await startJudge(scoreByMove);
    const t = game("B2", 0);
    t.tools = [{ type: "function", function: { name: "place_mark", parameters: { type: "object" } } }];
    await rulerScoreGroup(new TrajectoryGroup([game("A1", 0), t]), opts(judge));
    expect(judge.requests[0].body.messages[1].content).toContain(
      '<tools>\n[{"type":"function","function":{"name":"place_mark"',
    );
  });

  it("throws after maxRetries by default; returns null with swallowExceptions", async () => {
    judge = await startJudge(() => ({ status: 500 }));
    const group = new TrajectoryGroup([game("A1", 1), game("B2", 0)]);
    await expect(rulerScoreGroup(group, opts(judge))).rejects.toBeInstanceOf(RulerError);
    expect(judge.requests).toHaveLength(3);
    const warnings: string[] = [];
    const out = await rulerScoreGroup(
      group,
      opts(judge, { swallowExceptions: true, maxRetries: 1, debug: (l) => warnings.push(l) }),
    );
    expect(out).toBeNull();
    expect(judge.requests).toHaveLength(5);
    expect(warnings.some((w) => /dropping the group: ruler: judge judge at .* HTTP 500/.test(w))).toBe(true);
  });

  it("refuses trajectories with additionalHistories, even with swallowExceptions", async () => {
    judge = await startJudge(scoreByMove);
    const t = game("B2", 0);
    t.additionalHistories = [{ messagesAndChoices: [user("sub-task"), say("done")] }];
    const group = new TrajectoryGroup([game("A1", 0), t]);
    await expect(rulerScoreGroup(group, opts(judge, { swallowExceptions: true }))).rejects.toThrow(
      /trajectory 1 has 1 additionalHistories/,
    );
    expect(judge.requests).toHaveLength(0);
  });

  it("works as gatherTrajectoryGroups' afterEach: scored groups kept, a failed judge drops its group", async () => {
    // The judge fails whenever the group is the one about scenario "broken".
    judge = await startJudge((req) =>
      req.body.messages[1].content.includes("broken") ? { status: 503 } : scoreByMove(req),
    );
    const rollout = (scenario: string, move: string) => async () =>
      new Trajectory({ messagesAndChoices: [sys, user(`Scenario ${scenario}.`), say(move)], reward: 0 });
    const j = judge;
    const groups = await gatherTrajectoryGroups(
      [
        [rollout("ok", "C3"), rollout("ok", "B2"), rollout("ok", "A1")],
        [rollout("broken", "B2"), rollout("broken", "A1")],
      ],
      {
        afterEach: (g) => rulerScoreGroup(g, opts(j, { swallowExceptions: true, debug: () => {} })),
        progressBar: "off",
      },
    );
    expect(groups).toHaveLength(1);
    expect(groups[0].rewards()).toEqual(["C3", "B2", "A1"].map((m) => moveScore[m]));
    expect(groups[0].trajectories.every((t) => t.metrics.independent_reward === 0)).toBe(true);
    expect(judge.requests.filter((r) => r.body.messages[1].content.includes("broken"))).toHaveLength(3);
  });

  it("end-to-end, no network: the project's own model is the judge through the in-process client", async () => {
    const model = join(import.meta.dirname, "../../../models/webart-tiny");
    const engine = await Engine.load(model, { name: "judge", kvSlots: 4, maxContext: 4096 });
    // Every reply the judge sends, as the handler returned it.
    const replies: string[] = [];
    const client = clientForHandler(async (req) => {
      const res = await engine.handler(req);
      const body = await res.clone().json();
      replies.push(body.choices?.[0]?.message?.content ?? "");
      return res;
    });
    try {
      const group = new TrajectoryGroup([
        new Trajectory({
          messagesAndChoices: [sys, user("Board: empty. Your move."), say("<move>B2</move>")],
          reward: 1,
        }),
        new Trajectory({
          messagesAndChoices: [sys, user("Board: empty. Your move."), say("<move>A9</move>")],
          reward: -1,
        }),
      ]);
      const scored = await rulerScoreGroup(group, {
        client,
        model: "judge",
        clampScores: true,
        swallowExceptions: true,
        // One answer is enough to check its shape: each is ~650 byte-level tokens of constrained decoding.
        maxRetries: 0,
        requestParams: { temperature: 1, seed: 11 },
      });
      // Constrained decoding: even this tiny judge's every reply is JSON of the requested shape, two entries
      // with known ids. (It may name the same id twice, which ruler refuses; a real judge would not.)
      expect(replies.length).toBeGreaterThan(0);
      for (const r of replies) {
        const v = JSON.parse(r) as { scores: { trajectory_id: string; explanation: string; score: number }[] };
        expect(v.scores).toHaveLength(2);
        for (const e of v.scores) {
          expect(["1", "2"]).toContain(e.trajectory_id);
          expect(typeof e.explanation).toBe("string");
          expect(Number.isFinite(e.score)).toBe(true);
        }
      }
      if (scored) for (const t of scored.trajectories) expect(t.reward >= 0 && t.reward <= 1).toBe(true);
    } finally {
      await engine.close();
    }
  }, 300_000);
});
