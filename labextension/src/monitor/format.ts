/** Small text helpers shared by the views (pure). */

import type { Header, WarmFacts } from "./protocol";

/** `42 s`, `3 m 05 s`, `1 h 02 m`. */
export function formatDuration(seconds: number | null): string {
  if (seconds === null || !Number.isFinite(seconds) || seconds < 0) return "";
  const s = Math.floor(seconds);
  if (s < 60) return `${s} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m} m ${String(s % 60).padStart(2, "0")} s`;
  const h = Math.floor(m / 60);
  return `${h} h ${String(m % 60).padStart(2, "0")} m`;
}

/** Seconds since a rank was heard from: `0.4 s`, `42 s`, `3 m`, `2 h`. */
export function formatAge(seconds: number | null): string {
  if (seconds === null || !Number.isFinite(seconds)) return "";
  const s = Math.max(0, seconds);
  if (s < 10) return `${s.toFixed(1)} s`;
  if (s < 120) return `${Math.round(s)} s`;
  if (s < 7200) return `${Math.round(s / 60)} m`;
  return `${Math.round(s / 3600)} h`;
}

/** A metric value, short but exact enough to compare: 0.01234, 1.235e-7, 12345. */
export function formatValue(value: number | null | undefined): string {
  if (value === null || value === undefined || !Number.isFinite(value)) return "–";
  if (Number.isInteger(value) && Math.abs(value) < 1e9) return String(value);
  const abs = Math.abs(value);
  if (abs !== 0 && (abs < 1e-3 || abs >= 1e6)) return value.toExponential(3);
  return String(Number(value.toPrecision(4)));
}

/** An axis tick: as short as it can be, `3e-4`, `1.5e-4`, `0.25`, `1200`. */
export function formatTick(value: number | null | undefined): string {
  if (value === null || value === undefined || !Number.isFinite(value)) return "";
  const abs = Math.abs(value);
  if (abs !== 0 && (abs < 1e-3 || abs >= 1e6)) {
    const [mantissa = "", exponent = ""] = value.toExponential(2).split("e");
    return `${String(Number(mantissa))}e${exponent.replace("+", "")}`;
  }
  return String(Number(value.toPrecision(4)));
}

/**
 * Run time in seconds from the header: until `ended`, or until now on the kernel's clock
 * (`clockOffset` = kernel clock - browser clock, measured when the header arrived).
 */
export function elapsedSeconds(header: Header, clockOffset: number, browserNow: number): number | null {
  if (header.started === null) return null;
  const end = header.ended ?? browserNow + clockOffset;
  return Math.max(0, end - header.started);
}

/** `step 42 / 100` or `step 42` or ``. */
export function formatStep(step: number | null, total: number | null): string {
  if (step === null) return total !== null ? `step – / ${total}` : "";
  return total !== null ? `step ${step} / ${total}` : `step ${step}`;
}

const SIGNALS: Record<string, string> = {
  SIGKILL: "killed (SIGKILL): often the out-of-memory killer or a forced stop",
  SIGSEGV: "segmentation fault (SIGSEGV): a crash in native code",
  SIGABRT: "aborted (SIGABRT): a native assertion or an unclean shutdown",
  SIGTERM: "terminated (SIGTERM): asked to stop",
  SIGBUS: "bus error (SIGBUS): often shared memory (/dev/shm) too small",
  SIGINT: "interrupted (SIGINT)",
};

/** What the failing rank's exit means, in words. */
export function exitText(exitCode: number | null, signal: string | null): string {
  if (signal) return SIGNALS[signal] ?? `ended by signal ${signal}`;
  if (exitCode === null) return "";
  if (exitCode === 137) return "exit code 137: killed (SIGKILL), often the out-of-memory killer";
  return `exit code ${exitCode}`;
}

/** Human label of a run state. */
export function stateLabel(state: string, stopping: boolean): string {
  if (stopping && !["succeeded", "failed", "cancelled"].includes(state)) return "Stopping";
  return state ? state.charAt(0).toUpperCase() + state.slice(1) : "";
}

/** How the run was started: "cold", or its warm gang and generation ("warm gang-… · gen 3"; "warm, gang starting"
 * before the ranks were forked). The recycle reason is shown apart ({@link recycledText}). */
export function launchText(warm: WarmFacts | null): string {
  if (warm === null) return "cold";
  if (!warm.gang) return "warm, gang starting";
  return `warm ${warm.gang} · gen ${warm.generation}`;
}

/** "recycled: <why>" once the warm generation's ranks were recycled; "" otherwise (and for cold runs). */
export function recycledText(warm: WarmFacts | null): string {
  return warm !== null && warm.recycled ? `gang recycled after generation ${warm.generation}: ${warm.recycled}` : "";
}

/** The tooltip of the shape line's "cold" / "warm …": what the words mean. */
export function launchTitle(warm: WarmFacts | null): string {
  if (warm === null) {
    return "cold: this run started new processes (Python, torch and your imports loaded from scratch); --warm keeps a gang of ranks with them loaded, so the next run starts in a second or two";
  }
  return "warm: the ranks were forked from a gang kept alive with Python, torch and the imports already loaded (--warm); gen = how many runs that gang has served";
}

/** The Resume button's tooltip: what it does, or why it is disabled. */
export function resumeTitle(canResume: boolean): string {
  return canResume
    ? "Relaunch the gang from the run's latest checkpoint"
    : "Resume needs a checkpoint and this run saved none (nbtrain.save_checkpoint(accelerator, step) saves one); run the cell again to start over";
}

/** Why the monitor shows no MLflow link (the run's tracking store has no web page of its own). */
export const NO_MLFLOW_PAGE =
  "No MLflow page to open: MLflow's default store is a local file (sqlite:///mlflow.db in the kernel's working directory), " +
  "which has no web server. Run `mlflow ui --backend-store-uri sqlite:///mlflow.db` there and open http://127.0.0.1:5000, " +
  "or set MLFLOW_TRACKING_URI to a tracking server (http://…) to get a link here. (Tracking may also be off: NBTRAIN_TRACKING=0.)";
