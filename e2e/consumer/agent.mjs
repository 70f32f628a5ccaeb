// (b) A user's own task, written against the installed package: a rollout through the model's `openai` client,
// a reward of its own (replies near 8 characters score best), a warm start by supervised fine-tuning on two example
// replies, then two GRPO steps with TrainableModel + LocalBackend on the embedded model. Prints one JSON line with
// what it did.
import { gatherTrajectoryGroups, LocalBackend, TrainableModel, Trajectory } from "webart";

const model = new TrainableModel({ name: "short-replies", project: "consumer", baseModel: "webart-tiny" });
const backend = new LocalBackend({ path: ".art" });
await model.register(backend);
const client = model.openaiClient();

async function rollout(topic) {
  const messages = [
    { role: "system", content: "Reply with one short word." },
    { role: "user", content: `Name a ${topic}.` },
  ];
  const completion = await client.chat.completions.create({
    model: model.getInferenceName(),
    messages,
    max_tokens: 12,
    temperature: 1,
  });
  const choice = completion.choices[0];
  const reply = choice.message.content ?? "";
  return new Trajectory({ messagesAndChoices: [...messages, choice], reward: -Math.abs(reply.length - 8) / 8 });
}

// Warm start (ART's train_sft): the example replies' assistant turns, one checkpoint.
const examples = [
  ["color", "magenta"],
  ["fruit", "apricot"],
].map(
  ([topic, word]) =>
    new Trajectory({
      messagesAndChoices: [
        { role: "system", content: "Reply with one short word." },
        { role: "user", content: `Name a ${topic}.` },
        { role: "assistant", content: word },
      ],
    }),
);
const sft = await model.trainSft(examples, { learningRate: 1e-3 });

const rewards = [];
for (let step = 0; step < 2; step++) {
  const groups = await gatherTrajectoryGroups(
    ["color", "fruit"].map((topic) => Array.from({ length: 4 }, () => () => rollout(topic))),
  );
  rewards.push(groups.flatMap((g) => g.trajectories.map((t) => t.reward)));
  await model.train(groups, { learningRate: 1e-3 });
}
const step = await model.getStep();
await backend.close();
console.log(JSON.stringify({ step, rewards, sftLoss: sft.metrics.loss }));
