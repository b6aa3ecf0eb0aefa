// The /ws/chat/ client (docs/protocol.md): reconnects with backoff, queues frames while
// disconnected, resumes running turns (task.active → stream.resume), detects gaps in
// stream.delta sequences and resumes from the last good one. Every server frame is
// re-dispatched as an event named by its type; deltas arrive in order, once.
//
// Extra events: "state" (detail: "connecting" | "open" | "reconnecting" | "closed"),
// "session-ended" (the server closed the socket with 4401), "handshake-failed" (detail:
// how many attempts in a row never opened; a signed-out session is refused that way).

const BACKOFF_MS = [500, 1000, 2000, 4000, 8000, 10000];
// docs/protocol.md §1: chat.history, like message.store and sync.*, is a bulk frame (4 MiB).
const BULK_FRAME_BYTES = 4 * 1024 * 1024;
const HISTORY_RESERVE_BYTES = 64 * 1024;
const SHORTENED_CHARS = 2000;
const PING_MS = 20000;
const SESSION_ENDED = 4401;

export class ChatSocket extends EventTarget {
  constructor(url) {
    super();
    this.url = url;
    this.socket = null;
    this.outbox = [];
    this.attempt = 0;
    this.pending = new Map(); // request_id -> {resolve, reject, types}
    this.streams = new Map(); // task_id -> {chatId, messageId, last, resuming}
    this.stopped = false;
    this.state = "connecting";
    this.pingTimer = null;
  }

  connect() {
    this.stopped = false;
    this.setState(this.attempt === 0 ? "connecting" : "reconnecting");
    const socket = new WebSocket(this.url);
    this.socket = socket;
    let opened = false;
    socket.addEventListener("open", () => {
      opened = true;
      this.attempt = 0;
      this.setState("open");
      const queued = this.outbox.splice(0);
      for (const frame of queued) socket.send(JSON.stringify(frame));
      this.emit("connected", {});
      this.pingTimer = setInterval(() => this.send({ type: "ping", ts: Date.now() }), PING_MS);
    });
    socket.addEventListener("message", (event) => this.receive(event.data));
    socket.addEventListener("close", (event) => {
      clearInterval(this.pingTimer);
      if (this.socket !== socket) return;
      this.socket = null;
      if (event.code === SESSION_ENDED) {
        this.stopped = true;
        this.setState("closed");
        this.emit("session-ended", { code: event.code });
        return;
      }
      if (this.stopped) {
        this.setState("closed");
        return;
      }
      for (const stream of this.streams.values()) stream.resuming = false;
      if (!opened) this.emit("handshake-failed", this.attempt + 1);
      const delay = BACKOFF_MS[Math.min(this.attempt, BACKOFF_MS.length - 1)];
      this.attempt += 1;
      this.setState("reconnecting");
      setTimeout(() => { if (!this.stopped) this.connect(); }, delay * (0.75 + Math.random() / 2));
    });
  }

  // Whether a frame sent now goes out at once (else it waits in the outbox).
  isOpen() {
    return Boolean(this.socket) && this.socket.readyState === WebSocket.OPEN;
  }

  close() {
    this.stopped = true;
    if (this.socket) this.socket.close(1000);
  }

  setState(state) {
    this.state = state;
    this.emit("state", state);
  }

  emit(type, detail) {
    this.dispatchEvent(new CustomEvent(type, { detail }));
  }

  send(frame) {
    if (this.socket && this.socket.readyState === WebSocket.OPEN) {
      this.socket.send(JSON.stringify(frame));
    } else if (frame.type !== "ping") {
      this.outbox.push(frame);
    }
  }

  // Sends a frame with a fresh request_id; resolves with the first answer of one of
  // `types` (or rejects with an `error` frame) carrying that request_id.
  request(frame, types) {
    const requestId = frame.request_id || crypto.randomUUID();
    return new Promise((resolve, reject) => {
      this.pending.set(requestId, { resolve, reject, types, chatId: frame.chat_id });
      this.send({ ...frame, request_id: requestId });
    });
  }

  // The client knows of a running turn (after message.accepted): track its sequence.
  track(taskId, chatId, messageId, last = 0) {
    if (!this.streams.has(taskId)) {
      this.streams.set(taskId, { chatId, messageId, last, resuming: false });
    }
  }

  resume(taskId) {
    const stream = this.streams.get(taskId);
    if (!stream || stream.resuming) return;
    stream.resuming = true;
    this.send({ type: "stream.resume", chat_id: stream.chatId, task_id: taskId, last_sequence: stream.last });
  }

  // A snapshot too long for one frame comes as consecutive parts (part 1…parts): returns
  // the whole snapshot once the last part is in, else null. A part out of order (never
  // sent so, but a client must not apply half a text) asks for the snapshot again.
  snapshotParts(stream, frame) {
    if (frame.part === 1) stream.parts = [];
    if (!stream.parts || stream.parts.length !== frame.part - 1) {
      stream.parts = null;
      stream.resuming = false;
      this.resume(frame.task_id);
      return null;
    }
    stream.parts.push(frame.content);
    if (frame.part < frame.parts) return null;
    const { part, parts, ...whole } = frame;
    whole.content = stream.parts.join("");
    stream.parts = null;
    return whole;
  }

  receive(text) {
    let frame;
    try {
      frame = JSON.parse(text);
    } catch (error) {
      return;
    }
    if (!frame || typeof frame.type !== "string") return;
    this.settle(frame);
    frame = this.inSequence(frame);
    if (frame) this.emit(frame.type, frame);
  }

  // Settles the request a frame answers: by its request_id, or without one by the first
  // request about the same chat waiting for that type.
  settle(frame) {
    if (!frame.request_id && frame.chat_id) {
      for (const [requestId, waiter] of this.pending) {
        if (waiter.chatId === frame.chat_id && waiter.types.includes(frame.type)) {
          this.pending.delete(requestId);
          waiter.resolve(frame);
          break;
        }
      }
    }
    if (!frame.request_id || !this.pending.has(frame.request_id)) return;
    // This tab asked: its own code handles the answer (handlers can tell by this flag).
    frame.answersOwnRequest = true;
    const waiter = this.pending.get(frame.request_id);
    if (frame.type === "error") {
      this.pending.delete(frame.request_id);
      const error = new Error(frame.message || frame.code);
      error.code = frame.code;
      error.frame = frame;
      waiter.reject(error);
    } else if (waiter.types.includes(frame.type)) {
      this.pending.delete(frame.request_id);
      waiter.resolve(frame);
    }
  }

  // The frame to dispatch, after the turn streams' bookkeeping: null for a delta already
  // had or out of sequence, or a snapshot part before the last.
  inSequence(frame) {
    switch (frame.type) {
      case "task.active":
        for (const task of frame.tasks || []) {
          this.track(task.task_id, task.chat_id, task.assistant_message_id, 0);
          const stream = this.streams.get(task.task_id);
          stream.resuming = false;
          this.resume(task.task_id);
        }
        return frame;
      case "message.accepted":
        this.track(frame.task_id, frame.chat_id, frame.assistant_message_id, 0);
        return frame;
      case "stream.delta":
        return this.deltaInSequence(frame);
      case "stream.snapshot":
        return this.snapshotInSequence(frame);
      case "stream.done":
        this.streamDone(frame);
        return frame;
      default:
        return frame;
    }
  }

  deltaInSequence(frame) {
    this.track(frame.task_id, frame.chat_id, frame.message_id, 0);
    const stream = this.streams.get(frame.task_id);
    if (frame.sequence <= stream.last) return null; // already have it (another copy)
    if (stream.resuming || frame.sequence !== stream.last + 1) {
      this.resume(frame.task_id); // a gap: ask for a snapshot
      return null;
    }
    stream.last = frame.sequence;
    return frame;
  }

  snapshotInSequence(frame) {
    this.track(frame.task_id, frame.chat_id, frame.message_id, 0);
    const stream = this.streams.get(frame.task_id);
    const whole = frame.parts > 1 ? this.snapshotParts(stream, frame) : frame;
    if (!whole) return null;
    stream.resuming = false;
    if (whole.sequence < stream.last) return null;
    stream.last = whole.sequence;
    return whole;
  }

  // Whether this tab holds every delta of the reply: a stream.done too long to carry its
  // content (content_omitted) is then answered from them.
  streamDone(frame) {
    const stream = this.streams.get(frame.task_id);
    frame.deltasComplete = Boolean(stream) && typeof frame.sequence === "number"
      && !stream.resuming && stream.last === frame.sequence;
    this.streams.delete(frame.task_id);
  }
}

export function chatSocketUrl() {
  const scheme = window.location.protocol === "https:" ? "wss" : "ws";
  return `${scheme}://${window.location.host}/ws/chat/`;
}

const encoder = new TextEncoder();
const jsonBytes = (value) => encoder.encode(JSON.stringify(value)).length;

// `messages` ({message_id, role, content, opt. files}, oldest first) made to fit one
// chat.history frame: while they are too large together, the oldest are shortened to
// their beginning (the model reads the newest messages; every message stays, so the count
// matches). Then the files' data (docs/protocol.md §13: a file {embed_id, name, mime,
// data}; an image goes by its name only) is kept for the newest files that still fit;
// the others go without it, which the server says in the message's text.
export function historyWithinLimit(messages) {
  const budget = BULK_FRAME_BYTES - HISTORY_RESERVE_BYTES;
  const named = messages.map((message) => (message.files?.length
    ? { ...message, files: message.files.map(({ data, ...file }) => file) }
    : message));
  const sizes = named.map((message) => jsonBytes(message) + 1);
  let total = sizes.reduce((sum, size) => sum + size, 0);
  const fitted = named.slice();
  for (let i = 0; i < fitted.length && total > budget; i += 1) {
    let head = fitted[i].content.slice(0, SHORTENED_CHARS);
    if (/[\ud800-\udbff]$/.test(head)) head = head.slice(0, -1); // no half of a pair
    const short = { ...fitted[i], content: `${head}…` };
    const size = jsonBytes(short) + 1;
    if (size >= sizes[i]) continue;
    total -= sizes[i] - size;
    fitted[i] = short;
  }
  for (let i = messages.length - 1; i >= 0; i -= 1) {
    (messages[i].files || []).forEach((file, f) => {
      // `,"data":"…"`: base64 needs no escapes.
      const size = typeof file.data === "string" ? file.data.length + 10 : 0;
      if (!size || total + size > budget) return;
      total += size;
      fitted[i].files[f] = { ...fitted[i].files[f], data: file.data };
    });
  }
  return fitted;
}
