/**
 * Types mirroring nbtrain/widgets/PROTOCOL.md (the contract with the Python `MonitorWidget`).
 *
 * Traits are read through `readTraits`, which tolerates a trait that is still `{}` or `null`
 * (a widget created before its first sync), so the views never have to.
 */

export type RunState =
  | "pending"
  | "queued"
  | "starting"
  | "running"
  | "stalled"
  | "succeeded"
  | "failed"
  | "cancelled";

/** `stopped`: ended without finishing (the run was cancelled, or the gang torn down after another rank failed). */
export type RankState = "starting" | "running" | "done" | "failed" | "stalled" | "stopped";

export interface Header {
  run_id: string;
  name: string;
  backend: string;
  nodes: number;
  procs: number;
  world_size: number;
  device: string;
  state: RunState;
  started: number | null;
  ended: number | null;
  now: number;
  step: number | null;
  total: number | null;
  attempt: number;
  notices: string[];
  /** What the backend says the run is doing now (queued and why, waiting for pods, a stall); "" when nothing. */
  detail: string;
  tracking_url: string | null;
  can_resume: boolean;
  stopping: boolean;
  /** null: a cold run; else the --warm run's gang ("" until its ranks were forked) and generation (0 before). */
  warm: WarmFacts | null;
}

export interface WarmFacts {
  gang: string;
  generation: number;
  /** Why that generation's ranks were recycled ("rank 1 raised ValueError", "cancelled"); "" unless they were. */
  recycled: string;
}

/** `[rank, state, step, age_s, straggler]` */
export type RankTuple = [number, RankState, number | null, number | null, 0 | 1];

export interface NodeRanks {
  node: number;
  ranks: RankTuple[];
}

export interface Ranks {
  median_step: number | null;
  counts: Partial<Record<RankState | "straggler", number>>;
  nodes: NodeRanks[];
}

export interface Failure {
  summary: string;
  rank: number | null;
  node: number | null;
  exit_code: number | null;
  signal: string | null;
  reason: string;
  exc_type: string | null;
  message: string | null;
  traceback: string | null;
  last_lines: string[];
}

export interface EnvRank {
  rank: number;
  host?: string;
  python?: string;
  torch?: string;
  accelerate?: string;
  device?: string;
  gpu_name?: string | null;
  mismatch?: string[];
}

export interface Env {
  kernel: Record<string, string>;
  ranks: EnvRank[];
  mismatches: number;
}

export interface Traits {
  header: Header;
  ranks: Ranks;
  failure: Failure | null;
  env: Env | null;
  metric_keys: string[];
  log_ranks: number[];
  line_counts: Record<string, number>;
}

export type TraitName = keyof Traits;
export const TRAIT_NAMES: readonly TraitName[] = [
  "header",
  "ranks",
  "failure",
  "env",
  "metric_keys",
  "log_ranks",
  "line_counts",
];

/** `[step, value]`; value null when the kernel had a non-finite number */
export type Point = [number, number | null];

export interface BatchMsg {
  type: "batch";
  seq: number;
  /** Missing when the batch has no points (the JS tolerates any of these fields being absent). */
  points?: Record<string, Point[]>;
  /** `[rank, index, text]` */
  lines?: [number, number, string][];
  dropped?: Record<string, number>;
}

export interface SnapshotMsg {
  type: "snapshot";
  points?: Record<string, Point[]>;
  lines?: Record<string, [number, string][]>;
  merged?: [number, number, string][];
}

export interface PageMsg {
  type: "page";
  rank: number;
  start: number;
  lines: string[];
  eof: boolean;
}

export type InMsg = BatchMsg | SnapshotMsg | PageMsg;

export type OutMsg =
  | { type: "hello" }
  | { type: "page"; rank: number; before: number; limit: number }
  | { type: "stop" }
  | { type: "resume" };

/** The part of anywidget's model API the monitor uses (works the same in JupyterLab and Notebook 7). */
export interface WidgetModel {
  get(name: string): unknown;
  on(event: string, callback: (...args: unknown[]) => void): void;
  off(event?: string | null, callback?: ((...args: unknown[]) => void) | null): void;
  send(content: OutMsg): void;
}

const EMPTY_HEADER: Header = {
  run_id: "",
  name: "",
  backend: "",
  nodes: 0,
  procs: 0,
  world_size: 0,
  device: "unknown",
  state: "pending",
  started: null,
  ended: null,
  now: 0,
  step: null,
  total: null,
  attempt: 0,
  notices: [],
  detail: "",
  tracking_url: null,
  can_resume: false,
  stopping: false,
  warm: null,
};

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function nonEmpty(value: unknown): value is Record<string, unknown> {
  return isObject(value) && Object.keys(value).length > 0;
}

/** Read every trait once, with defaults for the ones not synced yet. */
export function readTraits(model: WidgetModel): Traits {
  const header = model.get("header");
  const ranks = model.get("ranks");
  const failure = model.get("failure");
  const env = model.get("env");
  const keys = model.get("metric_keys");
  const logRanks = model.get("log_ranks");
  const counts = model.get("line_counts");
  return {
    header: { ...EMPTY_HEADER, ...(isObject(header) ? (header as Partial<Header>) : {}) },
    ranks: {
      median_step: null,
      counts: {},
      nodes: [],
      ...(isObject(ranks) ? (ranks as Partial<Ranks>) : {}),
    },
    failure: nonEmpty(failure) ? ({ last_lines: [], ...failure } as unknown as Failure) : null,
    env: nonEmpty(env) && Array.isArray(env["ranks"]) ? (env as unknown as Env) : null,
    metric_keys: Array.isArray(keys) ? keys.map(String) : [],
    log_ranks: Array.isArray(logRanks) ? logRanks.map(Number) : [],
    line_counts: isObject(counts) ? (counts as Record<string, number>) : {},
  };
}

/** Narrow an incoming custom message; unknown types are ignored by the caller. */
export function asInMsg(content: unknown): InMsg | null {
  if (!isObject(content)) return null;
  const type = content["type"];
  return type === "batch" || type === "snapshot" || type === "page" ? (content as unknown as InMsg) : null;
}

export const TERMINAL_STATES: ReadonlySet<RunState> = new Set(["succeeded", "failed", "cancelled"]);
