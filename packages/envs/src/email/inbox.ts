// Synthetic inboxes for the email-search agent (ART•E-style): from one seed, 20–50 emails holding a few topics
// (an email that answers a question and distractors that share its words) among everyday filler, and the
// scenario's question. The generator checks that exactly one email answers the question, that the question's
// own words find it, and that its first word alone finds more than it (so the agent has to search).
import { Rng } from "@webart/gpu";
import { KINDS, pickN, type Draft, type Person, type Picker } from "./questions.ts";
import { searchInbox } from "./search.ts";
import { FILLERS, FIRST_NAMES, LAST_NAMES, WEEKDAYS } from "./words.ts";

export interface Email {
  /** "m4821": what read_email and return_final_answer take. */
  id: string;
  /** "Dana Lee <dana.lee@example.com>" */
  from: string;
  to: string[];
  /** ISO 8601, UTC: "2024-03-14T09:21:00.000Z". */
  date: string;
  subject: string;
  body: string;
}

export interface Inbox {
  /** "Alex Moreno <alex.moreno@example.com>" */
  owner: string;
  /** The day the agent is asked on (ISO date, after every email). */
  today: string;
  /** Oldest first. */
  emails: Email[];
  /** The fact each email states, by id (only emails that state one). */
  facts: Record<string, string>;
}

export interface Question {
  kind: string;
  text: string;
  /** The expected answer, as the answering email writes it ("Tuesday 3pm", "$240", "Dana"). */
  answer: string;
  /** The one email that answers it. */
  messageId: string;
  /** A search that returns that email alone: its distinctive words (and sender, when the question names one). */
  keywords: string[];
  from?: string;
}

export type EmailSplit = "train" | "eval";

export interface EmailScenario {
  /** The inbox's seed (emailScenarioSeed). */
  seed: number;
  inbox: Inbox;
  question: Question;
}

const TOPICS = [3, 4]; // topics per inbox: min, max
const EMAILS = [20, 50];
const DAY_MS = 86_400_000;

/**
 * The inbox seed of scenario `index` of a split. Training seeds are even and evaluation seeds odd, whatever the
 * index (taken modulo 2^31), so no training scenario is ever an evaluation scenario.
 */
export function emailScenarioSeed(split: EmailSplit, index: number): number {
  if (!Number.isInteger(index) || index < 0) throw new Error(`email scenario index ${index}: expected an integer >= 0`);
  return (index % 2 ** 31) * 2 + (split === "eval" ? 1 : 0);
}

/** The split a scenario seed belongs to. */
export const emailSplitOf = (seed: number): EmailSplit => (seed % 2 === 1 ? "eval" : "train");

/** Scenario `index` of a split: its inbox and question. */
export const emailScenario = (split: EmailSplit, index: number): EmailScenario =>
  newEmailScenario(emailScenarioSeed(split, index));

/** The inbox and question of a seed; throws if the draw could not give a question with exactly one answer. */
export function newEmailScenario(seed: number): EmailScenario {
  const rng = new Rng(seed);
  for (let attempt = 0; attempt < 20; attempt++) {
    const s = draw(rng);
    const problem = checkScenario(s.inbox, s.question);
    if (!problem) return { seed, ...s };
  }
  throw new Error(`email scenario seed ${seed}: no inbox with a uniquely answered question in 20 draws`);
}

/** Why a question is not a good one for its inbox (null: it is). */
export function checkScenario(inbox: Inbox, q: Question): string | null {
  const answering = inbox.emails.filter((e) => inbox.facts[e.id] === inbox.facts[q.messageId]);
  if (answering.length !== 1)
    return `${answering.length} emails answer "${q.text}": ${answering.map((e) => e.id).join(", ")}`;
  const e = answering[0];
  if (!`${e.subject}\n${e.body}`.includes(q.answer)) return `email ${e.id} does not contain the answer "${q.answer}"`;
  const found = searchInbox(inbox, { keywords: q.keywords, from: q.from });
  const ids = "error" in found ? [] : found.results.map((r) => r.message_id);
  if (ids.length !== 1 || ids[0] !== q.messageId)
    return `searching ${JSON.stringify(q.keywords)} from ${q.from} finds ${ids.join(", ") || "nothing"}, not ${q.messageId} alone`;
  const broad = searchInbox(inbox, { keywords: q.keywords.slice(0, 1) });
  if ("error" in broad || broad.results.length < 2) return `"${q.keywords[0]}" alone finds one email: no search needed`;
  return null;
}

function draw(rng: Rng): Omit<EmailScenario, "seed"> {
  const cast = pickN(rng, FIRST_NAMES, 16).map((first): Person => {
    const last = LAST_NAMES[rng.int(LAST_NAMES.length)];
    return { first, last, from: `${first} ${last} <${first.toLowerCase()}.${last.toLowerCase()}@example.com>` };
  });
  const owner = cast.pop()!;
  const picker: Picker = { rng, people: (n) => pickN(rng, cast, n) };
  const kinds = pickN(rng, Object.keys(KINDS), TOPICS[0] + rng.int(TOPICS[1] - TOPICS[0] + 1));
  const topics = kinds.map((k) => KINDS[k](picker));
  const drafts: Draft[] = topics.flatMap((t) => [t.answer, ...t.distractors]);
  const total = EMAILS[0] + rng.int(EMAILS[1] - EMAILS[0] + 1);
  while (drafts.length < total) {
    const [subject, body] = FILLERS[rng.int(FILLERS.length)];
    const n = String(2 + rng.int(9));
    const day = WEEKDAYS[rng.int(WEEKDAYS.length)];
    const fill = (s: string) => s.replaceAll("{n}", n).replaceAll("{day}", day);
    drafts.push({ sender: cast[rng.int(cast.length)], subject: fill(subject), sentence: fill(body) });
  }

  const today = Date.UTC(2024, 0, 1) + (60 + rng.int(300)) * DAY_MS;
  const ids = new Set<string>();
  const emails = drafts.map((d): Email & { fact?: string } => {
    let id: string;
    do id = `m${1000 + rng.int(9000)}`;
    while (ids.has(id));
    ids.add(id);
    const date = new Date(today - (1 + rng.int(60)) * DAY_MS + (7 * 60 + rng.int(12 * 60)) * 60_000);
    const cc = rng.int(4) === 0 ? [cast[rng.int(cast.length)].from] : [];
    const to = [owner.from, ...cc.filter((c) => c !== d.sender.from)];
    const greeting = ["Hi", "Hello", "Hey"][rng.int(3)];
    const sign = ["Thanks,\n", "Cheers,\n", "Best,\n", ""][rng.int(4)];
    const body = `${greeting} ${owner.first},\n\n${d.sentence}\n\n${sign}${d.sender.first}`;
    return { id, from: d.sender.from, to, date: date.toISOString(), subject: d.subject, body, fact: d.fact };
  });
  emails.sort((a, b) => (a.date < b.date ? -1 : a.date > b.date ? 1 : 0));
  const facts: Record<string, string> = {};
  for (const e of emails) if (e.fact) facts[e.id] = e.fact;
  const inbox: Inbox = {
    owner: owner.from,
    today: new Date(today).toISOString().slice(0, 10),
    emails: emails.map(({ fact: _f, ...e }) => e),
    facts,
  };
  const t = topics[rng.int(topics.length)];
  const q = t.question;
  const messageId = emails.find((e) => e.fact === q.fact)!.id;
  const question: Question = { kind: q.kind, text: q.text, answer: q.answer, messageId, keywords: q.keywords };
  if (q.from) question.from = q.from;
  return { inbox, question };
}

/** The weekday of an ISO date, for the system prompt ("Tuesday"). */
export const weekdayOf = (isoDate: string): string =>
  ["Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"][new Date(isoDate).getUTCDay()];
