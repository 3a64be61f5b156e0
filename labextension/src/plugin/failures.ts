/**
 * Which runs failed while this page watched them (pure): the runs panel's model sees every state change,
 * and a run that goes from active (or unseen, after the first listing) to failed gets one toast, as a
 * cancelled run gets one from the Cancel command.
 */

import type { RunState, RunSummary } from "./wire";
import { isActive } from "./wire";

export class FailureWatch {
  private readonly known = new Map<string, RunState>();
  private primed = false;

  /**
   * The runs of `runs` that failed since the previous call. Nothing before the first call with `loaded`
   * (the runs that had failed before the page opened are old news); after that, a run seen active before,
   * or new to the list, that is now failed. Each failure is reported once.
   */
  newlyFailed(runs: readonly RunSummary[], loaded: boolean): RunSummary[] {
    const out: RunSummary[] = [];
    for (const run of runs) {
      const before = this.known.get(run.id);
      if (this.primed && run.state === "failed" && (before === undefined || isActive(before))) out.push(run);
      this.known.set(run.id, run.state);
    }
    if (loaded) this.primed = true;
    return out;
  }
}
