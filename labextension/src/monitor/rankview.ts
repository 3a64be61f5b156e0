/** What a rank cell and a node header say (pure): state, step, age, straggler and stall hints. */

import { formatAge } from "./format";
import type { NodeRanks, RankState, RankTuple } from "./protocol";

/** Above this many ranks, cells shrink to coloured squares and nodes start collapsed. */
export const DETAILED_MAX_RANKS = 64;

export interface RankCell {
  rank: number;
  state: RankState;
  straggler: boolean;
  step: string;
  age: string;
  /** Steps behind the median, when known and positive. */
  behind: number | null;
  title: string;
}

/** `extraAge`: seconds since the ranks trait arrived, added to `age_s` while the run is live. */
export function describeRank(tuple: RankTuple, median: number | null, extraAge = 0): RankCell {
  const [rank, state, step, ageS, straggler] = tuple;
  const ended = state === "done" || state === "failed" || state === "stopped";
  const age = ageS === null ? null : ageS + (ended ? 0 : extraAge);
  const behind = step !== null && median !== null && median > step ? median - step : null;
  const parts = [`rank ${rank}`, state];
  if (step !== null) parts.push(`step ${step}`);
  if (age !== null) parts.push(state === "stalled" ? `no sign of life for ${formatAge(age)}` : `heard ${formatAge(age)} ago`);
  if (straggler) {
    parts.push(behind !== null ? `straggler: ${behind} steps behind the median (${median})` : "straggler");
  }
  return {
    rank,
    state,
    straggler: straggler === 1,
    step: step === null ? "–" : String(step),
    age: age === null ? "" : formatAge(age),
    behind,
    title: parts.join(" · "),
  };
}

const ORDER: readonly RankState[] = ["failed", "stalled", "starting", "running", "stopped", "done"];

export interface NodeSummary {
  node: number;
  total: number;
  stragglers: number;
  /** The most alarming state on the node (failed > stalled > starting > running > stopped > done). */
  worst: RankState | null;
  text: string;
}

export function summarizeNode(node: NodeRanks): NodeSummary {
  const counts = new Map<RankState, number>();
  let stragglers = 0;
  for (const [, state, , , straggler] of node.ranks) {
    counts.set(state, (counts.get(state) ?? 0) + 1);
    stragglers += straggler;
  }
  const worst = ORDER.find((state) => counts.has(state)) ?? null;
  const states = ORDER.filter((state) => counts.has(state)).map((state) => `${counts.get(state)} ${state}`);
  const n = node.ranks.length;
  let text = `node ${node.node} · ${n} rank${n === 1 ? "" : "s"}`;
  if (states.length) text += `: ${states.join(", ")}`;
  if (stragglers) text += ` · ${stragglers} straggler${stragglers === 1 ? "" : "s"}`;
  return { node: node.node, total: n, stragglers, worst, text };
}

/** Cells show rank, step and age up to DETAILED_MAX_RANKS ranks; beyond, only colour (details on hover). */
export function isDetailed(worldSize: number): boolean {
  return worldSize <= DETAILED_MAX_RANKS;
}

/** Nodes start collapsed on big gangs (their header still shows per-state counts). */
export function startsCollapsed(worldSize: number): boolean {
  return worldSize > DETAILED_MAX_RANKS;
}
