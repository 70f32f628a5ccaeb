// npm runs a script named "pre<name>" before `npm run <name>`, so `npm run train` would also run "pretrain".
// npm gives that hook the same environment and arguments (none) as a direct `npm run pretrain`, so this looks at
// the npm process that started us: npm sets its process title to the command, e.g. "npm run train --env 2048".
import { spawnSync } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";

/** Command line and parent pid of a process, from /proc (Linux) or `ps` elsewhere; null if neither works. */
function proc(pid) {
  try {
    if (existsSync(`/proc/${pid}/cmdline`)) {
      // npm sets its process title ("npm run train --x"), which replaces argv with one string: split on spaces too.
      const args = readFileSync(`/proc/${pid}/cmdline`, "utf8")
        .split(/[\0\s]+/)
        .filter(Boolean);
      const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
      const ppid = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
      return { args, ppid };
    }
    const r = spawnSync("ps", ["-o", "ppid=,args=", "-p", String(pid)], { encoding: "utf8" });
    const m = /^\s*(\d+)\s+(.*)$/.exec(r.stdout ?? "");
    return m ? { args: m[2].split(/\s+/), ppid: Number(m[1]) } : null;
  } catch {
    return null;
  }
}

/**
 * For a "pre<name>" script: `name` when an ancestor process (a few levels up) is `npm run <name>`, i.e. npm runs
 * this script as that one's hook; null when it was run directly (`npm run pre<name>`, or not through npm).
 */
export function runAsHookOf(lifecycleEvent, startPid = process.ppid) {
  if (!lifecycleEvent?.startsWith("pre")) return null;
  const main = lifecycleEvent.slice(3);
  let pid = startPid;
  for (let depth = 0; depth < 4 && pid > 1; depth++) {
    const p = proc(pid);
    if (!p) return null;
    const i = p.args.findIndex((a) => a === "run" || a === "run-script" || a === "rum" || a === "urn");
    if (i >= 0) {
      const script = p.args.slice(i + 1).find((a) => !a.startsWith("-"));
      return script === main ? main : null;
    }
    pid = p.ppid;
  }
  return null;
}
