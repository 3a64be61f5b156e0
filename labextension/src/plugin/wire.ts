/**
 * Wire models of the server extension's REST API (nbtrain/server/runs.py) and their parsers (pure).
 *
 * A run row is nbtrain.model.RunSummary; its JSON Schema is nbtrain/schemas/run-summary.schema.json, and
 * test/plugin-wire.test.ts parses the fixtures the Python tests validate against it
 * (tests/data/wire/run-summaries.json).
 *
 * The server is trusted but versioned separately from this bundle (a stale browser tab, a newer
 * wheel): every payload is checked here once, so the views only ever see well-formed values.
 */

// one definition of the run states, shared with the monitor (nbtrain/widgets/PROTOCOL.md)
import type { RunState } from "../monitor/protocol";

export type { RunState };

const STATES: readonly RunState[] = [
  "pending",
  "queued",
  "starting",
  "running",
  "stalled",
  "succeeded",
  "failed",
  "cancelled",
];
const ACTIVE: ReadonlySet<RunState> = new Set<RunState>(["pending", "queued", "starting", "running", "stalled"]);

/** True while a run can still change: pending, queued, starting, running or stalled (running without progress). */
export function isActive(state: RunState): boolean {
  return ACTIVE.has(state);
}

/** One row of `GET /nbtrain/runs` (and of each `/nbtrain/events` message). Times are epoch seconds. */
export interface RunSummary {
  id: string;
  name: string;
  state: RunState;
  backend: string;
  nodes: number;
  procs: number;
  worldSize: number;
  created: number;
  started: number | null;
  ended: number | null;
  /** Seconds from start to end, or to the server's clock when the row was sent (live runs). */
  duration: number;
  attempt: number;
  step: number | null;
  total: number | null;
  /** One line: who failed first and why (failed runs), else null. */
  failure: string | null;
  /** The global rank that failed first, or null (not failed, or no rank to blame). */
  failedRank: number | null;
  notebook: string | null;
  trackingUrl: string | null;
  attachCode: string;
  canResume: boolean;
  /** What the backend says the run is doing now while it is active (queued with its reason, a stall), else null. */
  detail: string | null;
}

/** `POST /nbtrain/export`'s answer: the job directory (relative to the server root) and its files. */
export interface ExportResult {
  path: string;
  files: string[];
  /** the cell exported, as the server names it ("cell 5 (id 8fcaf022)") */
  cell?: string;
  /** what the user should know (e.g. "2 %%distributed cells (…): exported the last; …") */
  notes?: string[];
}

/** The server's JSON error body: `{"error": "RunNotFoundError", "message": "..."}`. */
export interface ErrorBody {
  error: string;
  message: string;
}

type Json = Record<string, unknown>;

function isObject(value: unknown): value is Json {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function num(value: unknown): number | null {
  return typeof value === "number" && Number.isFinite(value) ? value : null;
}

function rank(value: unknown): number | null {
  return typeof value === "number" && Number.isInteger(value) && value >= 0 ? value : null;
}

function str(value: unknown): string | null {
  return typeof value === "string" ? value : null;
}

/** A run row from the wire, or null when it lacks an id or a known state. */
export function parseRunSummary(value: unknown): RunSummary | null {
  if (!isObject(value)) return null;
  const id = str(value.id);
  const state = str(value.state);
  if (!id || !STATES.includes(state as RunState)) return null;
  const nodes = num(value.nodes) ?? 1;
  const procs = num(value.procs) ?? 1;
  const created = num(value.created) ?? 0;
  return {
    id,
    name: str(value.name) ?? id,
    state: state as RunState,
    backend: str(value.backend) ?? "",
    nodes,
    procs,
    worldSize: num(value.world_size) ?? nodes * procs,
    created,
    started: num(value.started),
    ended: num(value.ended),
    duration: Math.max(0, num(value.duration) ?? 0),
    attempt: num(value.attempt) ?? 0,
    step: num(value.step),
    total: num(value.total),
    failure: str(value.failure),
    failedRank: rank(value.failed_rank),
    notebook: str(value.notebook),
    trackingUrl: str(value.tracking_url),
    attachCode: str(value.attach_code) ?? `import nbtrain\nrun = nbtrain.attach(${JSON.stringify(id)})\nrun.show()`,
    canResume: value.can_resume === true,
    detail: str(value.detail),
  };
}

/** The rows of `{"runs": [...]}` (the list endpoint and each server-sent event); bad rows are dropped. */
export function parseRunList(value: unknown): RunSummary[] {
  if (!isObject(value) || !Array.isArray(value.runs)) return [];
  return value.runs.map(parseRunSummary).filter((row): row is RunSummary => row !== null);
}

export function parseExportResult(value: unknown): ExportResult | null {
  if (!isObject(value)) return null;
  const path = str(value.path);
  if (path === null) return null;
  const files = Array.isArray(value.files) ? value.files.filter((f): f is string => typeof f === "string") : [];
  const result: ExportResult = { path, files };
  const cell = str(value.cell);
  if (cell !== null) result.cell = cell;
  if (Array.isArray(value.notes)) result.notes = value.notes.filter((n): n is string => typeof n === "string");
  return result;
}

export function parseErrorBody(value: unknown): ErrorBody | null {
  if (!isObject(value)) return null;
  const message = str(value.message);
  return message === null ? null : { error: str(value.error) ?? "Error", message };
}
