/**
 * The "Adoption" figures of `GET /nbtrain/stats` (nbtrain/stats/render.py `to_json`; definitions in
 * docs/stats.md) as label/value lines for the runs panel (pure: no DOM).
 */

/** One line of the section: what it is, its value, and a test id. */
export interface StatsLine {
  label: string;
  value: string;
  testid: string;
}

type Obj = Record<string, unknown>;

function obj(value: unknown): Obj | null {
  return typeof value === "object" && value !== null && !Array.isArray(value) ? (value as Obj) : null;
}

function num(value: unknown): number | null {
  return typeof value === "number" && Number.isFinite(value) ? value : null;
}

/** `42 s`, `6.7 min`, `3.2 h`, `30.0 d`; `–` for null. */
export function shortDuration(seconds: number | null): string {
  if (seconds === null) return "–";
  if (seconds < 120) return `${Math.round(seconds)} s`;
  if (seconds < 7200) return `${(seconds / 60).toFixed(1)} min`;
  return seconds < 2 * 86400 ? `${(seconds / 3600).toFixed(1)} h` : `${(seconds / 86400).toFixed(1)} d`;
}

function percent(ratio: number | null): string {
  return ratio === null ? "–" : `${(100 * ratio).toFixed(1)}%`;
}

/** The window's title: `last 30 days`, `every run`. */
export function windowText(body: unknown): string {
  const seconds = num(obj(obj(body)?.window)?.seconds);
  if (seconds === null) return "every run";
  const days = seconds / 86400;
  return Number.isInteger(days) ? `last ${days} ${days === 1 ? "day" : "days"}` : `last ${shortDuration(seconds)}`;
}

/** The section's lines; null when `body` is not a stats document. */
export function statsLines(body: unknown): StatsLine[] | null {
  const doc = obj(body);
  const runs = obj(doc?.runs);
  const recovery = obj(doc?.recovery);
  const wait = obj(doc?.queue_wait_s);
  const templates = obj(doc?.templates);
  const checkpoint = obj(doc?.checkpoint_recovery);
  if (doc === null || runs === null || recovery === null || wait === null || templates === null || checkpoint === null) {
    return null;
  }
  const succeeded = num(runs.succeeded) ?? 0;
  const failed = num(runs.failed) ?? 0;
  const lines: StatsLine[] = [];
  for (const user of Array.isArray(doc.users) ? doc.users : []) {
    const u = obj(user);
    if (u === null) continue;
    const seconds = num(u.time_to_first_distributed_s);
    lines.push({
      label: `First distributed run (${String(u.user)})`,
      value: seconds === null ? "not yet" : shortDuration(seconds),
      testid: "nbtrain-stats-first",
    });
  }
  lines.push({
    label: "Success rate",
    value: `${percent(num(runs.success_rate))} (${succeeded} of ${succeeded + failed})`,
    testid: "nbtrain-stats-success",
  });
  const recover = obj(recovery.time_to_recover_s);
  lines.push({
    label: "Time to recover",
    value: `${shortDuration(num(recover?.mean))} mean (${num(recovery.recovered) ?? 0} recovered, ` +
      `${num(recovery.unrecovered) ?? 0} open)`,
    testid: "nbtrain-stats-recover",
  });
  lines.push({
    label: "Queue wait",
    value: (num(wait.count) ?? 0) === 0 ? "–" :
      `${shortDuration(num(wait.p50))} median, ${shortDuration(num(wait.p90))} p90 (${num(wait.count)})`,
    testid: "nbtrain-stats-queue",
  });
  lines.push({
    label: "Templates",
    value: templates.recorded === true ? `${percent(num(templates.share))} of runs` : "not recorded",
    testid: "nbtrain-stats-templates",
  });
  lines.push({
    label: "Checkpoint recovery",
    value: `${percent(num(checkpoint.rate))} (${num(checkpoint.succeeded) ?? 0} of ${num(checkpoint.from_checkpoint) ?? 0})`,
    testid: "nbtrain-stats-checkpoint",
  });
  for (const backend of Array.isArray(doc.backends) ? doc.backends : []) {
    const b = obj(backend);
    if (b === null) continue;
    const gpu = num(b.gpu_hours) ?? 0;
    lines.push({
      label: `Gang-hours (${String(b.backend)})`,
      value: `${(num(b.process_hours) ?? 0).toFixed(2)} process-h` + (gpu > 0 ? `, ${gpu.toFixed(2)} GPU-h` : ""),
      testid: "nbtrain-stats-hours",
    });
  }
  return lines;
}
