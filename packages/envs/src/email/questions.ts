// The kinds of question an inbox can hold. Each kind writes one email that answers its question and distractors
// that share the question's words: the same subject from someone else, the same sender on another subject, and
// the same sender mentioning the subject without the fact. Facts are keyed (kind|who|what) so the generator can
// check that exactly one email answers the question.
import type { Rng } from "@webart/gpu";
import {
  APPOINTMENTS,
  BOOKINGS,
  CITIES,
  EVENTS,
  FOODS,
  PARTIES,
  PLACES,
  PURCHASES,
  TIMES,
  WEEKDAYS,
  type Subject,
} from "./words.ts";

export interface Person {
  first: string;
  last: string;
  /** "Dana Lee <dana.lee@example.com>" */
  from: string;
}

/** An email before it has an id and a date; `fact` is the key of what it states, if anything. */
export interface Draft {
  sender: Person;
  subject: string;
  sentence: string;
  fact?: string;
}

export interface QuestionDraft {
  kind: string;
  text: string;
  answer: string;
  fact: string;
  /** A search that finds the answering email and nothing else: the question's distinctive words. */
  keywords: string[];
  from?: string;
}

export interface Topic {
  question: QuestionDraft;
  answer: Draft;
  distractors: Draft[];
}

/** Draws what a topic needs: distinct people for its roles, and values. */
export interface Picker {
  rng: Rng;
  /** `n` distinct people (never the inbox's owner). */
  people(n: number): Person[];
}

export type Kind = (p: Picker) => Topic;

const pick = <T>(rng: Rng, xs: readonly T[]): T => xs[rng.int(xs.length)];
/** `n` distinct items of `xs`. */
export function pickN<T>(rng: Rng, xs: readonly T[], n: number): T[] {
  const rest = [...xs];
  return Array.from({ length: n }, () => rest.splice(rng.int(rest.length), 1)[0]);
}
const cap = (s: string) => s[0].toUpperCase() + s.slice(1);
/** "Tuesday 3pm": a day and a time, distinct from the others drawn in the same topic. */
const whens = (rng: Rng, n: number) => pickN(rng, WEEKDAYS, n).map((d) => `${d} ${pick(rng, TIMES)}`);

const appointment: Kind = ({ rng, people }) => {
  const [p, q] = people(2);
  const [s, other] = pickN(rng, APPOINTMENTS, 2);
  const [when, when2, when3] = whens(rng, 3);
  const fact = (who: Person, x: Subject) => `appointment|${who.first}|${x.name}`;
  return {
    question: {
      kind: "appointment",
      text: `When is the ${s.name} ${p.first} mentioned?`,
      answer: when,
      fact: fact(p, s),
      keywords: s.words,
      from: p.first,
    },
    answer: {
      sender: p,
      subject: pick(rng, [`${cap(s.name)}`, `Out for a bit`, `Heads up`]),
      sentence: pick(rng, [
        `Just so you know, my ${s.name} is ${when}, so I will be away from my desk for a while.`,
        `I have my ${s.name} on ${when}. I will catch up on email afterwards.`,
      ]),
      fact: fact(p, s),
    },
    distractors: [
      {
        sender: q,
        subject: `${cap(s.name)} moved`,
        sentence: `My ${s.name} got moved to ${when2}, so I cannot make the call.`,
        fact: fact(q, s),
      },
      { sender: p, subject: pick(rng, ["Quick question", "Random thought"]), sentence: s.chatter },
      {
        sender: p,
        subject: `${cap(other.name)}`,
        sentence: `Reminder to myself and you: my ${other.name} is ${when3}.`,
        fact: fact(p, other),
      },
    ],
  };
};

const place: Kind = ({ rng, people }) => {
  const [p, q] = people(2);
  const [s, other] = pickN(rng, EVENTS, 2);
  const [where, where2, where3] = pickN(rng, PLACES, 3);
  const day = pick(rng, WEEKDAYS);
  const fact = (who: Person, x: Subject) => `place|${who.first}|${x.name}`;
  return {
    question: {
      kind: "place",
      text: `Where is the ${s.name} that ${p.first} is organising?`,
      answer: where,
      fact: fact(p, s),
      keywords: s.words,
      from: p.first,
    },
    answer: {
      sender: p,
      subject: pick(rng, [`${cap(s.name)} on ${day}`, "Venue sorted"]),
      sentence: `I have booked ${where} for the ${s.name} on ${day}. See you there!`,
      fact: fact(p, s),
    },
    distractors: [
      {
        sender: q,
        subject: `Our ${s.name}`,
        sentence: `For our own ${s.name} I reserved ${where2}, it is a bit quieter.`,
        fact: fact(q, s),
      },
      { sender: p, subject: pick(rng, ["Hello", "This week"]), sentence: s.chatter },
      {
        sender: p,
        subject: `${cap(other.name)} venue`,
        sentence: `The ${other.name} will be at ${where3} this time.`,
        fact: fact(p, other),
      },
    ],
  };
};

const cost: Kind = ({ rng, people }) => {
  const [p, q] = people(2);
  const [s, other] = pickN(rng, PURCHASES, 2);
  const [a, a2, a3] = pickN(rng, [...Array(96).keys()], 3).map((i) => `$${(i + 4) * 10 + pick(rng, [0, 5])}`);
  const fact = (who: Person, x: Subject) => `cost|${who.first}|${x.name}`;
  return {
    question: {
      kind: "cost",
      text: `How much did ${p.first} say the ${s.name} cost?`,
      answer: a,
      fact: fact(p, s),
      keywords: s.words,
      from: p.first,
    },
    answer: {
      sender: p,
      subject: pick(rng, ["Receipt", `${cap(s.name)}`, "Money stuff"]),
      sentence: `The ${s.name} came to ${a} in the end. I will send you the receipt.`,
      fact: fact(p, s),
    },
    distractors: [
      {
        sender: q,
        subject: `${cap(s.name)} for me`,
        sentence: `I paid ${a2} for my ${s.name}, which seemed steep.`,
        fact: fact(q, s),
      },
      { sender: p, subject: pick(rng, ["Catching up", "Small update"]), sentence: s.chatter },
      {
        sender: p,
        subject: "Expenses",
        sentence: `For the expense report: the ${other.name} was ${a3}.`,
        fact: fact(p, other),
      },
    ],
  };
};

const flight: Kind = ({ rng, people }) => {
  const [p, q] = people(2);
  const [city, city2] = pickN(rng, CITIES, 2);
  const [when, when2, when3] = whens(rng, 3);
  const time = when.split(" ")[1];
  const fact = (who: Person, c: string) => `flight|${who.first}|${c}`;
  return {
    question: {
      kind: "flight",
      text: `What time does ${p.first}'s flight to ${city} leave?`,
      answer: time,
      fact: fact(p, city),
      keywords: ["flight", city],
      from: p.first,
    },
    answer: {
      sender: p,
      subject: pick(rng, ["Travel plans", `Off to ${city}`]),
      sentence: `My flight to ${city} leaves at ${time} on ${when.split(" ")[0]}, so I will be offline from then.`,
      fact: fact(p, city),
    },
    distractors: [
      {
        sender: q,
        subject: "Travel plans",
        sentence: `I booked my flight to ${city} too, it leaves ${when2}.`,
        fact: fact(q, city),
      },
      {
        sender: p,
        subject: "Another trip",
        sentence: `Next month my flight to ${city2} is ${when3}.`,
        fact: fact(p, city2),
      },
      { sender: p, subject: "Ideas", sentence: `${city} was lovely last time. Any tips for things to see?` },
    ],
  };
};

const booking: Kind = ({ rng, people }) => {
  const [p, q] = people(2);
  const [s, other] = pickN(rng, BOOKINGS, 2);
  const code = () => Array.from({ length: 6 }, () => pick(rng, [..."ABCDEFGHJKLMNPQRSTUVWXYZ23456789"])).join("");
  const [c, c2, c3] = [code(), code(), code()];
  const fact = (who: Person, x: Subject) => `booking|${who.first}|${x.name}`;
  return {
    question: {
      kind: "booking",
      text: `What is the confirmation code for the ${s.name} ${p.first} made?`,
      answer: c,
      fact: fact(p, s),
      keywords: s.words,
      from: p.first,
    },
    answer: {
      sender: p,
      subject: pick(rng, ["Booked!", `${cap(s.name)}`]),
      sentence: `All done, the ${s.name} is made. The confirmation code is ${c}.`,
      fact: fact(p, s),
    },
    distractors: [
      {
        sender: q,
        subject: "Booked!",
        sentence: `I made a ${s.name} as well, confirmation code ${c2}.`,
        fact: fact(q, s),
      },
      { sender: p, subject: pick(rng, ["Weekend", "Plans"]), sentence: s.chatter },
      {
        sender: p,
        subject: `${cap(other.name)}`,
        sentence: `The ${other.name} went through: confirmation ${c3}.`,
        fact: fact(p, other),
      },
    ],
  };
};

const bring: Kind = ({ rng, people }) => {
  const [p, q, r, o] = people(4);
  const [party, party2] = pickN(rng, PARTIES, 2);
  const [food, food2] = pickN(rng, FOODS, 2);
  const fact = (f: string, x: { name: string }) => `bring|${f}|${x.name}`;
  return {
    question: {
      kind: "bring",
      text: `Who is bringing the ${food} to the ${party.name}?`,
      answer: p.first,
      fact: fact(food, party),
      keywords: [food, party.word],
    },
    answer: {
      sender: p,
      subject: `Re: ${party.name}`,
      sentence: `Count me in for the ${party.name}. I am bringing the ${food}!`,
      fact: fact(food, party),
    },
    distractors: [
      {
        sender: q,
        subject: `Re: ${party.name}`,
        sentence: `I will bring the ${food2} to the ${party.name}.`,
        fact: fact(food2, party),
      },
      {
        sender: r,
        subject: `${cap(party2.name)}`,
        sentence: `For the ${party2.name} I am bringing the ${food}, my usual.`,
        fact: fact(food, party2),
      },
      { sender: o, subject: `${cap(party.name)}`, sentence: party.chatter },
    ],
  };
};

export const KINDS: Record<string, Kind> = { appointment, place, cost, flight, booking, bring };
