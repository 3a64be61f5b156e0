/**
 * Metric series held in the browser (pure): streaming append, bounded memory, and min/max
 * decimation for drawing (at most `drawMax` points on screen whatever the run length).
 */

/** A value may be null when the kernel had a non-finite number (drawn as a gap). */
export type Value = number | null;

export interface XY {
  xs: number[];
  ys: Value[];
}

/**
 * Reduce a series to at most `maxPoints` points, keeping its shape: the first and the last point,
 * and for each of the (maxPoints - 2) / 2 index buckets in between its lowest and highest point,
 * in x order. Spikes survive (a loss blow-up stays visible), unlike plain striding.
 */
export function decimate(xs: readonly number[], ys: readonly Value[], maxPoints: number): XY {
  const n = xs.length;
  if (n <= maxPoints) return { xs: xs.slice(), ys: ys.slice() };
  if (maxPoints < 2) {
    return maxPoints === 1 ? { xs: [xs[n - 1] as number], ys: [ys[n - 1] ?? null] } : { xs: [], ys: [] };
  }
  const out: XY = { xs: [xs[0] as number], ys: [ys[0] ?? null] };
  const buckets = Math.floor((maxPoints - 2) / 2);
  const interior = n - 2; // indices 1 .. n-2
  for (let b = 0; b < buckets; b++) {
    const lo = 1 + Math.floor((b * interior) / buckets);
    const hi = 1 + Math.floor(((b + 1) * interior) / buckets); // exclusive
    if (hi <= lo) continue;
    let iMin = -1;
    let iMax = -1;
    for (let i = lo; i < hi; i++) {
      const y = ys[i];
      if (y === null || y === undefined) continue;
      if (iMin < 0 || y < (ys[iMin] as number)) iMin = i;
      if (iMax < 0 || y > (ys[iMax] as number)) iMax = i;
    }
    if (iMin < 0) {
      // the whole bucket is missing values: keep one gap so the line breaks there
      out.xs.push(xs[lo] as number);
      out.ys.push(null);
      continue;
    }
    const first = Math.min(iMin, iMax);
    const second = Math.max(iMin, iMax);
    out.xs.push(xs[first] as number);
    out.ys.push(ys[first] ?? null);
    if (second !== first) {
      out.xs.push(xs[second] as number);
      out.ys.push(ys[second] ?? null);
    }
  }
  out.xs.push(xs[n - 1] as number);
  out.ys.push(ys[n - 1] ?? null);
  return out;
}

/** Index of the first element of sorted `xs` that is >= x. */
function lowerBound(xs: readonly number[], x: number): number {
  let lo = 0;
  let hi = xs.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if ((xs[mid] as number) < x) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/**
 * One metric's points, sorted by step. Holds at most `holdMax` points: past that it compacts itself
 * to half by decimation, so memory stays bounded on runs of any length.
 */
export class Series {
  private xs: number[] = [];
  private ys: Value[] = [];
  private version = 0;
  private drawnVersion = -1;
  private drawnCache: XY = { xs: [], ys: [] };

  constructor(
    readonly holdMax = 8000,
    readonly drawMax = 2000,
  ) {}

  /** Points held now (what the chart's `data-points` reports). */
  get length(): number {
    return this.xs.length;
  }

  get lastStep(): number | null {
    return this.xs.length ? (this.xs[this.xs.length - 1] as number) : null;
  }

  get lastValue(): Value {
    return this.ys.length ? (this.ys[this.ys.length - 1] ?? null) : null;
  }

  /** Replace everything (a snapshot). Points need not be sorted; duplicates keep the last value. */
  replace(points: readonly (readonly [number, Value])[]): void {
    this.xs = [];
    this.ys = [];
    const sorted = points.slice().sort((a, b) => a[0] - b[0]);
    for (const [x, y] of sorted) this.put(x, y);
    this.compact();
    this.version++;
  }

  /**
   * Append streamed points. A point at the last step replaces its value; a point at an earlier step
   * means the run went back (a restart from a checkpoint): the points from that step on are dropped
   * and the new attempt's points continue from there.
   */
  append(points: readonly (readonly [number, Value])[]): void {
    if (points.length === 0) return;
    for (const [x, y] of points) this.put(x, y);
    this.compact();
    this.version++;
  }

  /** The points to draw: at most `drawMax`, recomputed only when the series changed. */
  drawn(): XY {
    if (this.drawnVersion !== this.version) {
      this.drawnCache = decimate(this.xs, this.ys, this.drawMax);
      this.drawnVersion = this.version;
    }
    return this.drawnCache;
  }

  private put(x: number, y: Value): void {
    if (!Number.isFinite(x)) return;
    const value = typeof y === "number" && Number.isFinite(y) ? y : null;
    const last = this.xs.length ? (this.xs[this.xs.length - 1] as number) : -Infinity;
    if (x > last) {
      this.xs.push(x);
      this.ys.push(value);
    } else if (x === last) {
      this.ys[this.ys.length - 1] = value;
    } else {
      const cut = lowerBound(this.xs, x);
      this.xs.length = cut;
      this.ys.length = cut;
      this.xs.push(x);
      this.ys.push(value);
    }
  }

  private compact(): void {
    if (this.xs.length <= this.holdMax) return;
    const half = decimate(this.xs, this.ys, Math.max(2, Math.floor(this.holdMax / 2)));
    this.xs = half.xs;
    this.ys = half.ys;
  }
}
