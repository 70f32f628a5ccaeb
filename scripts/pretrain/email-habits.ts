// Scripted searchers through the real email env (scriptedOpenAI + rolloutEmail) on held-out questions: how much
// accuracy and reward each search habit gets, so what a model imitating one leaves to RL (models/README.md).
// Run: node --import tsx --conditions webart-source scripts/pretrain/email-habits.ts [episodes, default 400]
import {
  emailScenario,
  firstContentWord,
  naiveSearcher,
  perfectSearcher,
  rolloutEmail,
  scriptedOpenAI,
  summarizeEmail,
  type EmailScenario,
  type ScriptedPolicy,
} from "webart/envs";

const n = Number(process.argv[2] ?? 400);
type Msg = Parameters<ScriptedPolicy>[0];
const call = (name: string, args: object) => ({ toolCalls: [{ name, arguments: JSON.stringify(args) }] });
const question = (m: Msg) => String(m.find((x) => x.role === "user")?.content ?? "");
const words = (s: string) =>
  s
    .toLowerCase()
    .replace(/'s\b/g, "")
    .split(/[^a-z0-9]+/)
    .filter(Boolean);

/** The naive searcher with its first call replaced. */
function firstCall(first: (q: string, s: EmailScenario) => object): (s: EmailScenario) => ScriptedPolicy {
  return (s) => {
    const naive = naiveSearcher();
    return (m, r) => (m.length === 2 ? call("search_inbox", first(question(m), s)) : naive(m, r));
  };
}
const names = (q: string) =>
  q
    .split(/[^A-Za-z']+/)
    .filter((w) => /^[A-Z]/.test(w) && !/^(What|When|Where|Who|How)$/.test(w))
    .map((w) => w.replace(/'s$/, ""));

const players: Record<string, (s: EmailScenario) => ScriptedPolicy> = {
  perfect: (s) => perfectSearcher(s),
  naive: () => naiveSearcher(),
  "naive word + from (the question's capitalised name)": firstCall((q) => {
    const from = names(q).at(-1);
    return from ? { keywords: [firstContentWord(q)], from } : { keywords: [firstContentWord(q)] };
  }),
  "perfect keywords, no from": firstCall((_, s) => ({ keywords: s.question.keywords })),
  "last content word": firstCall((q) => ({
    keywords: [
      words(q)
        .filter((w) => w.length > 3)
        .at(-1)!,
    ],
  })),
};
for (const [name, p] of Object.entries(players)) {
  const ts = await Promise.all(
    Array.from({ length: n }, (_, i) =>
      rolloutEmail(scriptedOpenAI(p(emailScenario("eval", i))).client, {
        model: "scripted",
        scenario: emailScenario("eval", i),
      }),
    ),
  );
  const e = summarizeEmail(ts);
  console.log(
    `${name}: accuracy ${e.accuracy.toFixed(3)}, right email ${e.rightMessage.toFixed(3)}, reward ${e.meanReward.toFixed(3)}, turns ${e.meanTurns.toFixed(2)}`,
  );
}
