// Expands the VEVENTs of iCalendar text with Mozilla's ical.js (2.x), so that
// Python tests (tests/icaljs.py) can compare the instants ical.js computes with
// ours. Every TZID must resolve to a VTIMEZONE of the same calendar: ical.js has
// no zone database of its own, and this script refuses the fall-backs it does
// have (a TZID with no VTIMEZONE read as floating time; an instant before the
// first observance of its VTIMEZONE read at UTC offset 0): they are reported as
// errors, never silently computed.
//
// Run:  node icaljs_expand.mjs <node_modules folder holding ical.js>
//       (or set ICALJS_NODE_MODULES), JSON on stdin, JSON on stdout.
//
// Input, one job:   {"ics": "<VCALENDAR text>", "start": "<RFC 3339>", "end": "<RFC 3339>",
//                    "max_occurrences": 20000}                         (the last is optional)
//   or many:        {"jobs": [<job>, ...], "event_timeout_ms": 10000}  (the last is optional)
// Output, one job:  {"<UID>": [<occurrence>, ...] | {"error": "<message>"}, ...}
//                   or {"__error__": "<message>"} when the calendar as a whole fails;
//   for many:       a list of those, in the order of the jobs.
// An occurrence:
//   {"start": "2025-07-14T07:00:00Z" | null, "end": "..." | null,
//    "all_day": bool, "date": "YYYY-MM-DD" | null, "end_date": "YYYY-MM-DD" | null,
//    "recurrence_id": "<UTC instant, or YYYY-MM-DD for dates>" | null,
//    "floating": bool, "cancelled": bool, "summary": "<SUMMARY>" | null}
//   Timed occurrences have start/end (UTC, second precision) and null dates;
//   all-day ones (DATE values) have date/end_date (end_date exclusive) and null
//   start/end. Floating date-times (no TZID, no Z) are reported as if UTC, with
//   "floating": true. "cancelled" is the STATUS:CANCELLED of the component the
//   occurrence comes from (the override's own, for an overridden instance), and so
//   is "summary" its SUMMARY.
//
// Which occurrences: those whose interval meets [start, end) (a zero-length one
// when start <= its start < end); an all-day one spans its dates from 00:00Z.
// Occurrences are listed by start (all-day ones by date). Expansion is ical.js's
// own: ICAL.Event with its RECURRENCE-ID overrides related (same UID only),
// RRULE, RDATE and EXDATE as RecurExpansion handles them. An override whose
// RECURRENCE-ID the rule does not produce is ignored, as ical.js does; overrides
// with no master VEVENT are reported as single occurrences.
//
// Bounds: iteration stops once an occurrence's RECURRENCE-ID passes `end` (and
// every override's RECURRENCE-ID, and the largest backward RANGE=THISANDFUTURE
// shift); more than max_occurrences iterations before that is an error for the
// UID. ical.js itself can loop forever on some rules (FREQ=DAILY;BYMONTH=2;
// BYMONTHDAY=30), so expansion runs in a worker thread and an event that takes
// longer than event_timeout_ms is reported as an error for its UID, the worker
// restarted for the rest.
//
// Parse errors: ICAL.parse fails for the whole text on some bad values
// (RRULE:FREQ=FOO, BYDAY=XX). Then each top-level VEVENT block is parsed alone
// (by ical.js) to find the failing ones: their UIDs get the error, the rest of
// the calendar is read without them. If the rest still fails, the job's result
// is {"__error__": ...}.

import { createRequire } from 'node:module';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { Worker, isMainThread, parentPort, workerData } from 'node:worker_threads';

const DEFAULT_MAX_OCCURRENCES = 20000;
const DEFAULT_EVENT_TIMEOUT_MS = 10000;
const JOB = null; // the "uid" of the job-level step (parsing, time zones)

function message(error) {
  if (error instanceof Error) return `${error.name}: ${error.message}`;
  return String(error);
}

// ------------------------------------------------------------------ main thread

async function readStdin() {
  const chunks = [];
  for await (const chunk of process.stdin) chunks.push(chunk);
  return Buffer.concat(chunks).toString('utf8');
}

async function main() {
  const nodeModules = process.argv[2] || process.env.ICALJS_NODE_MODULES;
  if (!nodeModules) {
    console.error('usage: icaljs_expand.mjs <node_modules folder> (or set ICALJS_NODE_MODULES)');
    process.exit(2);
  }
  const request = JSON.parse(await readStdin());
  const many = Array.isArray(request.jobs);
  const jobs = many ? request.jobs : [request];
  const timeoutMs = Number(request.event_timeout_ms ?? DEFAULT_EVENT_TIMEOUT_MS);
  const results = jobs.map(() => ({}));
  const skip = jobs.map(() => []); // UIDs done (or hung) per job, for a restarted worker

  let from = 0; // first job the next worker must do
  while (from < jobs.length) {
    from = await runWorker(nodeModules, jobs, from, skip, results, timeoutMs);
  }
  const output = many ? results : results[0];
  process.stdout.write(JSON.stringify(output));
}

// Runs one worker from job `from`; resolves with the job index to resume at
// (jobs.length when all are done).
function runWorker(nodeModules, jobs, from, skip, results, timeoutMs) {
  return new Promise((resolve, reject) => {
    const worker = new Worker(fileURLToPath(import.meta.url), {
      workerData: { nodeModules, jobs, from, skip },
      stdout: true, // the worker prints nothing to our stdout
    });
    let current = null; // {job, uid} being computed
    let timer = null;
    let finished = false;

    const finish = (resumeAt) => {
      if (finished) return;
      finished = true;
      clearTimeout(timer);
      resolve(resumeAt);
    };

    worker.on('message', (msg) => {
      if (msg.kind === 'begin') {
        current = { job: msg.job, uid: msg.uid };
        clearTimeout(timer);
        timer = setTimeout(async () => {
          const { job, uid } = current;
          const text = `ical.js did not finish within ${timeoutMs} ms (endless loop?)`;
          if (uid === JOB) {
            results[job] = { __error__: text };
          } else {
            results[job][uid] = { error: text };
            skip[job].push(uid);
          }
          finished = true; // before terminate: the exit event must not resolve
          await worker.terminate();
          resolve(uid === JOB ? job + 1 : job);
        }, timeoutMs);
      } else if (msg.kind === 'result') {
        clearTimeout(timer);
        current = null;
        if (msg.uid === JOB) {
          results[msg.job] = msg.value; // a job-level error
        } else {
          results[msg.job][msg.uid] = msg.value;
          skip[msg.job].push(msg.uid);
        }
      } else if (msg.kind === 'idle') {
        clearTimeout(timer);
        current = null;
      } else if (msg.kind === 'done') {
        finish(jobs.length);
      }
    });
    worker.on('error', (error) => {
      if (finished) return;
      // Something outside the per-event guards broke: fail the current job.
      const job = current ? current.job : from;
      results[job] = { __error__: `worker failed: ${message(error)}` };
      finish(job + 1);
    });
    worker.on('exit', (code) => {
      if (!finished) {
        finished = true;
        clearTimeout(timer);
        reject(new Error(`worker exited with code ${code} before finishing`));
      }
    });
  });
}

// ------------------------------------------------------------------ worker thread

async function loadIcal(nodeModules) {
  // ical.js lives in the test cache, not next to this file, and bare specifiers
  // in ES modules ignore NODE_PATH: resolve it from that folder.
  const require = createRequire(join(nodeModules, 'noop.js'));
  const module = await import(pathToFileURL(require.resolve('ical.js')).href);
  return module.default;
}

function iso(ms) {
  return new Date(ms).toISOString().replace(/\.\d{3}Z$/, 'Z');
}

function parseInstant(text, name) {
  const ms = Date.parse(text);
  if (typeof text !== 'string' || Number.isNaN(ms)) {
    throw new Error(`job "${name}" is not an RFC 3339 instant: ${JSON.stringify(text)}`);
  }
  return ms;
}

// Unfolded content lines of iCalendar text.
function contentLines(text) {
  return text.replace(/\r?\n[ \t]/g, '').split(/\r?\n/);
}

// The text split into [skeleton lines, [{uid, lines}] for each VEVENT directly
// inside a VCALENDAR], by BEGIN/END lines alone.
function splitEvents(text) {
  const skeleton = [];
  const events = [];
  const stack = [];
  let block = null;
  for (const line of contentLines(text)) {
    const begin = /^BEGIN:(.*)$/i.exec(line);
    const end = /^END:(.*)$/i.exec(line);
    if (begin) {
      const name = begin[1].trim().toUpperCase();
      if (!block && name === 'VEVENT' && stack.length === 1 && stack[0] === 'VCALENDAR') {
        block = { uid: '', lines: [], depth: stack.length + 1 };
      }
      stack.push(name);
    }
    if (block) {
      block.lines.push(line);
      const uid = /^UID(;[^:]*)?:(.*)$/i.exec(line);
      if (uid && stack.length === block.depth) block.uid = uid[2];
    } else {
      skeleton.push(line);
    }
    if (end) {
      stack.pop();
      if (block && stack.length < block.depth) {
        events.push(block);
        block = null;
      }
    }
  }
  return [skeleton, events];
}

// ICAL.parse, falling back to isolating the VEVENTs that ical.js cannot parse.
// Returns [root components, {uid: error message}, UIDs in the order of the text
// (when it had to be split, else [])].
function parseCalendar(ICAL, text) {
  const roots = (jcal) => {
    const list = typeof jcal[0] === 'string' ? [jcal] : jcal;
    return list.map((item) => new ICAL.Component(item));
  };
  let firstError;
  try {
    return [roots(ICAL.parse(text)), {}, []];
  } catch (error) {
    firstError = error;
  }
  const [skeleton, events] = splitEvents(text);
  const bad = {};
  const good = [];
  for (const event of events) {
    const alone = ['BEGIN:VCALENDAR', ...event.lines, 'END:VCALENDAR'].join('\r\n');
    try {
      ICAL.parse(alone);
      good.push(event);
    } catch (error) {
      bad[event.uid] = `ICAL.parse: ${message(error)}`;
    }
  }
  if (Object.keys(bad).length === 0) throw firstError;
  const end = skeleton.map((line) => line.toUpperCase()).lastIndexOf('END:VCALENDAR');
  if (end < 0) throw firstError;
  const kept = good.filter((event) => !(event.uid in bad)).flatMap((event) => event.lines);
  const rest = [...skeleton.slice(0, end), ...kept, ...skeleton.slice(end)].join('\r\n');
  return [roots(ICAL.parse(rest)), bad, events.map((event) => event.uid)];
}

// Throws unless the instant of `time` (zoned by a VTIMEZONE) falls on or after
// the first observance onset of that VTIMEZONE: before it, ical.js answers UTC
// offset 0 (Timezone.utcOffset), a fall-back this harness refuses.
function checkCovered(ICAL, time, what) {
  const zone = time.zone;
  if (!zone || time.isDate || zone === ICAL.Timezone.utcTimezone ||
      zone === ICAL.Timezone.localTimezone) {
    return;
  }
  zone._ensureCoverage(time.year);
  if (!zone.changes.length) {
    throw new Error(`VTIMEZONE ${zone.tzid} has no observance ical.js can use`);
  }
  // The comparison Timezone.utcOffset makes with the earliest change.
  const first = { ...zone.changes[0] };
  ICAL.Timezone.adjust_change(first, 0, 0, 0, Math.min(first.utcOffset, first.prevUtcOffset));
  const local = {
    year: time.year, month: time.month, day: time.day,
    hour: time.hour, minute: time.minute, second: time.second,
  };
  if (ICAL.Timezone._compare_change_fn(local, first) < 0) {
    throw new Error(`${what} ${time.toString()} ${zone.tzid} precedes the first observance ` +
                    `of its VTIMEZONE (ical.js would read it at UTC offset 0)`);
  }
}

function isCancelled(component) {
  const status = component.getFirstPropertyValue('status');
  return typeof status === 'string' && status.trim().toUpperCase() === 'CANCELLED';
}

function recurrenceIdText(time) {
  if (!time) return null;
  if (time.isDate) return time.toString();
  return iso(time.toUnixTime() * 1000);
}

function occurrenceOf(ICAL, start, end, recurrenceId, component) {
  checkCovered(ICAL, start, 'start');
  checkCovered(ICAL, end, 'end');
  const allDay = start.isDate;
  return {
    start: allDay ? null : iso(start.toUnixTime() * 1000),
    end: allDay ? null : iso(end.toUnixTime() * 1000),
    all_day: allDay,
    date: allDay ? start.toString() : null,
    end_date: allDay ? end.toString().slice(0, 10) : null,
    recurrence_id: recurrenceIdText(recurrenceId),
    floating: !allDay && start.zone === ICAL.Timezone.localTimezone,
    cancelled: isCancelled(component),
    summary: component.getFirstPropertyValue('summary') ?? null,
    // for the window test and sorting, not output:
    _s: start.toUnixTime() * 1000,
    _e: end.toUnixTime() * 1000,
  };
}

function meets(occurrence, windowStart, windowEnd) {
  const { _s: s, _e: e } = occurrence;
  if (e > s) return s < windowEnd && e > windowStart;
  return windowStart <= s && s < windowEnd;
}

function checkTzids(component, tzids) {
  for (const property of component.getAllProperties()) {
    const tzid = property.getParameter('tzid');
    if (tzid !== undefined && tzid !== null && !tzids.has(tzid)) {
      throw new Error(`${property.name.toUpperCase()};TZID=${tzid}: the calendar has ` +
                      `no VTIMEZONE with that TZID`);
    }
  }
}

function expandUid(ICAL, group, tzids, windowStart, windowEnd, maxOccurrences) {
  const { masters, overrides } = group;
  for (const component of [...masters, ...overrides]) checkTzids(component, tzids);
  if (masters.length > 1) {
    throw new Error(`${masters.length} VEVENTs with this UID and no RECURRENCE-ID`);
  }
  const found = [];
  if (masters.length === 0) {
    // Orphan overrides: each one as itself.
    for (const component of overrides) {
      const event = new ICAL.Event(component);
      found.push(occurrenceOf(ICAL, event.startDate, event.endDate, event.recurrenceId,
                              component));
    }
  } else {
    const event = new ICAL.Event(masters[0], {
      exceptions: overrides, strictExceptions: true,
    });
    // Go on past the window while an override may still move an instance into it.
    let stopAt = windowEnd;
    let lastOverride = -Infinity;
    for (const override of Object.values(event.exceptions)) {
      const rid = override.recurrenceId.toUnixTime() * 1000;
      lastOverride = Math.max(lastOverride, rid);
      if (override.modifiesFuture()) {
        const shift = override.startDate.toUnixTime() * 1000 - rid;
        if (shift < 0) stopAt = Math.max(stopAt, windowEnd - shift);
      }
    }
    const iterator = event.iterator();
    let count = 0;
    for (let next = iterator.next(); next; next = iterator.next()) {
      const rid = next.toUnixTime() * 1000;
      if (rid >= stopAt && rid > lastOverride) break;
      if (++count > maxOccurrences) {
        throw new Error(`more than ${maxOccurrences} occurrences before the end of the window ` +
                        `(raise max_occurrences)`);
      }
      const details = event.getOccurrenceDetails(next);
      found.push(occurrenceOf(ICAL, details.startDate, details.endDate, details.recurrenceId,
                              details.item.component));
    }
  }
  return found
    .filter((occurrence) => meets(occurrence, windowStart, windowEnd))
    .sort((a, b) => a._s - b._s)
    .map(({ _s, _e, ...occurrence }) => occurrence);
}

async function worker() {
  const { nodeModules, jobs, from, skip } = workerData;
  const ICAL = await loadIcal(nodeModules);
  const post = (message) => parentPort.postMessage(message);

  for (let job = from; job < jobs.length; job++) {
    const spec = jobs[job];
    const done = new Set(skip[job]);
    let groups;
    let parseErrors;
    let order;
    let window;
    post({ kind: 'begin', job, uid: JOB });
    try {
      window = [parseInstant(spec.start, 'start'), parseInstant(spec.end, 'end')];
      if (typeof spec.ics !== 'string') throw new Error('job "ics" must be a string');
      // Zones of earlier jobs must not leak into this one.
      ICAL.TimezoneService.reset();
      let roots;
      [roots, parseErrors, order] = parseCalendar(ICAL, spec.ics);
      groups = new Map(); // uid -> {masters, overrides, tzids}, in order of appearance
      for (const root of roots) {
        if (root.name !== 'vcalendar') throw new Error(`top-level ${root.name}, not VCALENDAR`);
        const tzids = new Set();
        for (const vtimezone of root.getAllSubcomponents('vtimezone')) {
          const tzid = vtimezone.getFirstPropertyValue('tzid');
          if (!tzid) throw new Error('a VTIMEZONE has no TZID');
          if (tzids.has(tzid)) throw new Error(`two VTIMEZONEs with TZID ${tzid}`);
          tzids.add(tzid);
          ICAL.TimezoneService.register(new ICAL.Timezone({ component: vtimezone, tzid }));
        }
        for (const vevent of root.getAllSubcomponents('vevent')) {
          const uid = String(vevent.getFirstPropertyValue('uid') ?? '');
          if (!groups.has(uid)) groups.set(uid, { masters: [], overrides: [], tzids });
          const group = groups.get(uid);
          (vevent.hasProperty('recurrence-id') ? group.overrides : group.masters).push(vevent);
        }
      }
    } catch (error) {
      post({ kind: 'result', job, uid: JOB, value: { __error__: message(error) } });
      continue;
    }
    post({ kind: 'idle' });
    // In the order of the text, the events ical.js could not parse included.
    for (const uid of new Set([...order, ...groups.keys()])) {
      if (done.has(uid)) continue;
      if (uid in parseErrors) {
        post({ kind: 'result', job, uid, value: { error: parseErrors[uid] } });
        continue;
      }
      const group = groups.get(uid);
      post({ kind: 'begin', job, uid });
      let value;
      try {
        value = uid === '' ? { error: 'VEVENT without UID' }
          : expandUid(ICAL, group, group.tzids, window[0], window[1],
                      Number(spec.max_occurrences ?? DEFAULT_MAX_OCCURRENCES));
      } catch (error) {
        value = { error: message(error) };
      }
      post({ kind: 'result', job, uid, value });
    }
  }
  post({ kind: 'done' });
}

if (isMainThread) {
  await main();
} else {
  await worker();
}
