/**
 * Coalesces redraw requests: any number of `request()` calls lead to one `draw()` in the next
 * animation frame, and frames are at least `minIntervalMs` apart (10 per second by default).
 */

export interface Timers {
  now(): number;
  frame(callback: () => void): number;
  cancelFrame(id: number): void;
  delay(callback: () => void, ms: number): number;
  cancelDelay(id: number): void;
}

export const browserTimers: Timers = {
  now: () => performance.now(),
  frame: (callback) => requestAnimationFrame(() => callback()),
  cancelFrame: (id) => cancelAnimationFrame(id),
  delay: (callback, ms) => window.setTimeout(callback, ms),
  cancelDelay: (id) => window.clearTimeout(id),
};

export class FrameScheduler {
  private frameId: number | null = null;
  private delayId: number | null = null;
  private lastDraw = -Infinity;
  private disposed = false;
  /** Number of draws so far (tests and the `data-frames` debugging attribute). */
  draws = 0;

  constructor(
    private readonly draw: () => void,
    private readonly minIntervalMs = 100,
    private readonly timers: Timers = browserTimers,
  ) {}

  request(): void {
    if (this.disposed || this.frameId !== null || this.delayId !== null) return;
    const wait = this.lastDraw + this.minIntervalMs - this.timers.now();
    if (wait > 0) {
      this.delayId = this.timers.delay(() => {
        this.delayId = null;
        this.scheduleFrame();
      }, wait);
    } else {
      this.scheduleFrame();
    }
  }

  dispose(): void {
    this.disposed = true;
    if (this.frameId !== null) this.timers.cancelFrame(this.frameId);
    if (this.delayId !== null) this.timers.cancelDelay(this.delayId);
    this.frameId = this.delayId = null;
  }

  private scheduleFrame(): void {
    this.frameId = this.timers.frame(() => {
      this.frameId = null;
      if (this.disposed) return;
      this.lastDraw = this.timers.now();
      this.draws++;
      this.draw();
    });
  }
}
