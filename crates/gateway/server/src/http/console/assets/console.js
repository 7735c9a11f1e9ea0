// The Gatehouse console's script: it fills the server-rendered page skeletons from the /v1
// routes, with the session cookie the browser sends by itself.
//
// Rules this file keeps:
// - Untrusted text (replies, tool output, file names, documents, skill descriptions, audit
//   fields) reaches the page only through text nodes (`el(...)`, `textContent`, form values),
//   never as markup: nothing here parses a string as HTML (no inner or outer HTML property,
//   no adjacent-HTML insertion, no document writing; a test of the Gateway holds it).
// - Every state-changing request carries the session's CSRF token in X-Gatehouse-Csrf.
// - The key itself never reaches this script; nothing is kept in localStorage, and the only
//   thing kept in sessionStorage is the last event seq seen per session (for `after=`).
"use strict";

(function () {
  const CSRF_HEADER = "X-Gatehouse-Csrf";
  const DOCUMENT_LIMIT_BYTES = 16 * 1024;
  const AUDIT_PAGE_SIZE = 50;
  // The most events one answer of GET /v1/audit carries.
  const AUDIT_API_PAGE = 1000;
  // A seq past any event: `before=` it answers the newest events.
  const AUDIT_NEWEST = "9223372036854775807";

  const csrfMeta = document.querySelector('meta[name="gatehouse-csrf"]');
  const csrfToken = csrfMeta ? csrfMeta.content : "";
  const scopes = (document.body.dataset.scopes || "").split(" ").filter(Boolean);
  const byId = (id) => document.getElementById(id);

  // Returns a new element with `attrs` set as properties or attributes and `children`
  // (strings become text nodes) appended.
  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attrs || {})) {
      if (value === undefined || value === null || value === false) continue;
      if (name === "className") node.className = value;
      else if (name === "onclick") node.addEventListener("click", value);
      else node.setAttribute(name, value === true ? "" : String(value));
    }
    for (const child of children.flat()) {
      if (child === undefined || child === null) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  function setStatus(id, text, isError) {
    const node = byId(id);
    if (!node) return;
    node.textContent = text;
    node.classList.toggle("error", Boolean(isError));
  }

  function formatMs(ms) {
    const number = Number(ms);
    if (!Number.isFinite(number) || number <= 0) return "—";
    return new Date(number).toLocaleString();
  }

  // An answer of the API that is not a success, with its stable code and message.
  class ApiError extends Error {
    constructor(status, code, message) {
      super(message);
      this.status = status;
      this.code = code;
    }
    describe() {
      return `${this.code}: ${this.message}`;
    }
  }

  // Calls a /v1 route; returns the decoded JSON, or throws an ApiError with the API's code.
  async function api(method, path, body, extraHeaders) {
    const headers = Object.assign({}, extraHeaders || {});
    const options = { method, headers, credentials: "same-origin" };
    if (method !== "GET" && method !== "HEAD") headers[CSRF_HEADER] = csrfToken;
    if (body !== undefined) {
      if (body instanceof Blob) {
        options.body = body;
      } else {
        headers["Content-Type"] = "application/json";
        options.body = JSON.stringify(body);
      }
    }
    let response;
    try {
      response = await fetch(path, options);
    } catch (error) {
      throw new ApiError(0, "NETWORK", `the Gateway did not answer (${error.message})`);
    }
    if (response.status === 401) {
      throw new ApiError(401, "UNAUTHORIZED", "the console session has ended; reload to log in again");
    }
    if (!response.ok) {
      let code = `HTTP_${response.status}`;
      let message = response.statusText;
      try {
        const answer = await response.json();
        if (answer && answer.error) {
          code = answer.error.code || code;
          message = answer.error.message || message;
        }
      } catch (_) {
        // Not JSON: keep the status.
      }
      throw new ApiError(response.status, code, message);
    }
    return response;
  }

  async function apiJson(method, path, body, extraHeaders) {
    const response = await api(method, path, body, extraHeaders);
    return response.json();
  }

  function randomId() {
    const bytes = new Uint8Array(16);
    crypto.getRandomValues(bytes);
    return Array.from(bytes, (byte) => byte.toString(16).padStart(2, "0")).join("");
  }

  // ---- Every page ----------------------------------------------------------------------

  function localizeTimes() {
    for (const node of document.querySelectorAll("time[data-ms]")) {
      const ms = Number(node.dataset.ms);
      node.textContent = formatMs(ms);
      if (Number.isFinite(ms) && ms > 0) node.setAttribute("datetime", new Date(ms).toISOString());
    }
  }

  // Gives each cell of the page's tables its column's heading as `data-label`, which the style
  // sheet shows beside the value where a narrow screen stacks a row's cells; rows added later
  // are labelled as they arrive.
  function labelTables() {
    for (const table of document.querySelectorAll("main table")) {
      const headings = Array.from(table.querySelectorAll("thead th"), (th) => th.textContent);
      const tbody = table.querySelector("tbody");
      if (!tbody) continue;
      const label = () => {
        for (const row of tbody.rows) {
          Array.from(row.cells).forEach((cell, index) => {
            if (headings[index] && cell.dataset.label !== headings[index]) {
              cell.dataset.label = headings[index];
            }
          });
        }
      };
      label();
      new MutationObserver(label).observe(tbody, { childList: true });
    }
  }

  // ---- Chat ----------------------------------------------------------------------------

  function chatPage() {
    const transcript = byId("transcript");
    const live = byId("live");
    const sessionKey = transcript.dataset.session;
    const base = `/v1/sessions/${encodeURIComponent(sessionKey)}`;
    const seqKey = `gatehouse.lastSeq.${sessionKey}`;
    const liveReplies = new Map();
    const attachments = [];
    let refreshTimer = null;
    let lastRenderedSeq = -Infinity;
    // The furthest state seen per turn: the answer to a POST may arrive after the stream already
    // said the turn started, and must not set the status line back to queued.
    const turnRanks = new Map();
    const RANKS = { queued: 0, running: 1 };

    function showTurn(turnId, status, detail, isError) {
      const rank = status in RANKS ? RANKS[status] : 2;
      if ((turnRanks.get(turnId) ?? -1) > rank) return;
      turnRanks.set(turnId, rank);
      setStatus("chat-status", `turn ${turnId} ${status}${detail ? `: ${detail}` : ""}`, isError);
    }
    let source = null;

    function renderMessage(message) {
      const role = message.role;
      if (role === "tool") {
        const name = message.toolName || "tool";
        return el(
          "details",
          { className: "msg tool" },
          el("summary", {}, `tool ${name}`),
          el("pre", { className: "content" }, message.content),
        );
      }
      return el(
        "article",
        { className: `msg ${role}`, "data-seq": message.seq },
        el("div", { className: "role" }, role),
        el("div", { className: "content" }, message.content),
      );
    }

    async function refreshTranscript() {
      try {
        const answer = await apiJson("GET", `${base}/transcript`);
        // The transcript only grows: append what is new and keep the rest as it is, so an
        // opened tool message stays open.
        for (const message of answer.messages) {
          if (message.seq > lastRenderedSeq) {
            transcript.append(renderMessage(message));
            lastRenderedSeq = message.seq;
          }
        }
        const completed = new Set(
          answer.messages.filter((m) => m.role === "assistant").map((m) => m.turnId),
        );
        for (const [turnId, reply] of liveReplies) {
          if (reply.dataset.done === "true" && completed.has(turnId)) {
            reply.remove();
            liveReplies.delete(turnId);
          }
        }
      } catch (error) {
        setStatus("chat-status", error.describe ? error.describe() : String(error), true);
      }
    }

    function scheduleRefresh() {
      if (refreshTimer) return;
      refreshTimer = setTimeout(() => {
        refreshTimer = null;
        refreshTranscript();
      }, 100);
    }

    function liveReply(turnId) {
      let reply = liveReplies.get(turnId);
      if (!reply) {
        reply = el(
          "article",
          { className: "msg assistant streaming", "data-turn": turnId },
          el("div", { className: "role" }, "assistant"),
          el("div", { className: "content" }),
        );
        liveReplies.set(turnId, reply);
        live.append(reply);
      }
      return reply;
    }

    function addArtifact(data) {
      const list = byId("artifacts");
      if (list.querySelector(`[data-media="${CSS.escape(data.mediaId)}"]`)) return;
      const name = data.path.split("/").pop() || data.mediaId;
      list.append(
        el(
          "li",
          { "data-media": data.mediaId },
          el(
            "a",
            { href: `/v1/media/${encodeURIComponent(data.mediaId)}`, download: name },
            data.path,
          ),
          ` (${data.size} bytes)`,
        ),
      );
    }

    function remember(seq) {
      const number = Number(seq);
      if (!Number.isFinite(number)) return;
      const known = Number(sessionStorage.getItem(seqKey) || "0");
      if (number > known) sessionStorage.setItem(seqKey, String(number));
    }

    const handlers = {
      "turn.queued": (data) => showTurn(data.turnId, "queued"),
      "turn.started": (data) => showTurn(data.turnId, "running"),
      "message.delta": (data) => {
        const content = liveReply(data.turnId).querySelector(".content");
        content.append(document.createTextNode(data.text));
      },
      "message.completed": () => scheduleRefresh(),
      "tool.started": (data) => showTurn(data.turnId, "running", `tool ${data.tool}`),
      "tool.completed": () => scheduleRefresh(),
      "artifact.stored": (data) => addArtifact(data),
      "artifact.refused": (data) =>
        byId("artifacts").append(
          el("li", { className: "error" }, `${data.path} refused: ${data.error.code}: ${data.error.message}`),
        ),
      "turn.completed": (data) => {
        const reply = liveReplies.get(data.turnId);
        if (reply && typeof data.reply === "string") {
          reply.querySelector(".content").textContent = data.reply;
        }
        if (reply) {
          reply.dataset.done = "true";
          reply.classList.remove("streaming");
        }
        showTurn(data.turnId, data.status);
        scheduleRefresh();
      },
      "turn.failed": (data) => {
        const reply = liveReplies.get(data.turnId);
        if (reply) reply.dataset.done = "true";
        showTurn(data.turnId, data.status, `${data.error.code}: ${data.error.message}`, true);
        scheduleRefresh();
      },
      "stream.dropped": (data) => {
        setStatus("chat-status", `event stream dropped (${data.code}); resuming`, true);
        sessionStorage.setItem(seqKey, String(data.resumeAfter));
        openEvents();
      },
    };

    function openEvents() {
      if (source) source.close();
      const after = sessionStorage.getItem(seqKey) || "0";
      // Shown on the page so a reader (and the browser test) can see where the stream resumed.
      live.dataset.after = after;
      source = new EventSource(`${base}/events?after=${encodeURIComponent(after)}`);
      for (const [name, handle] of Object.entries(handlers)) {
        source.addEventListener(name, (event) => {
          let data;
          try {
            data = JSON.parse(event.data);
          } catch (_) {
            return;
          }
          if (name !== "stream.dropped") remember(data.seq);
          handle(data);
        });
      }
      source.addEventListener("error", () => {
        if (source.readyState === EventSource.CLOSED) {
          setStatus("chat-status", "the event stream closed; reload the page to resume", true);
        }
      });
    }

    function renderAttachments() {
      const list = byId("attachments");
      list.replaceChildren(
        ...attachments.map((item, index) =>
          el(
            "li",
            {},
            `${item.name} (${item.size} bytes) `,
            el(
              "button",
              {
                type: "button",
                "aria-label": `Remove ${item.name}`,
                onclick: () => {
                  attachments.splice(index, 1);
                  renderAttachments();
                },
              },
              "Remove",
            ),
          ),
        ),
      );
    }

    const sendForm = byId("send-form");
    if (sendForm) {
      byId("attachment").addEventListener("change", async (event) => {
        const input = event.target;
        for (const file of Array.from(input.files)) {
          try {
            setStatus("chat-status", `uploading ${file.name}`);
            const headers = {
              "Content-Type": file.type || "application/octet-stream",
              // A header value must be printable ASCII; other names travel percent-encoded.
              "X-Filename": /^[\x20-\x7e]*$/.test(file.name) ? file.name : encodeURIComponent(file.name),
            };
            const media = await apiJson("POST", "/v1/media", file, headers);
            attachments.push({ mediaId: media.mediaId, name: file.name, size: media.size });
            setStatus("chat-status", `uploaded ${file.name}`);
          } catch (error) {
            setStatus("chat-status", `upload of ${file.name} failed: ${error.describe()}`, true);
          }
        }
        input.value = "";
        renderAttachments();
      });
      sendForm.addEventListener("submit", async (event) => {
        event.preventDefault();
        const message = byId("message");
        const body = {
          text: message.value,
          idempotencyKey: `console-${randomId()}`,
        };
        const queueMode = byId("queue-mode").value;
        if (queueMode) body.queueMode = queueMode;
        if (attachments.length) body.attachments = attachments.map((item) => ({ mediaId: item.mediaId }));
        try {
          const accepted = await apiJson("POST", `${base}/messages`, body);
          message.value = "";
          attachments.length = 0;
          renderAttachments();
          showTurn(accepted.turnId, accepted.status);
          scheduleRefresh();
        } catch (error) {
          setStatus("chat-status", `not sent: ${error.describe()}`, true);
        }
      });
      byId("abort").addEventListener("click", async () => {
        try {
          const answer = await apiJson("POST", `${base}/abort`);
          setStatus("chat-status", answer.aborted ? "aborted the running turn" : "no turn was running");
        } catch (error) {
          setStatus("chat-status", `abort failed: ${error.describe()}`, true);
        }
      });
    }

    refreshTranscript().then(openEvents);
  }

  // ---- Agent documents -----------------------------------------------------------------

  function documentsPage() {
    const name = byId("doc-name");
    const content = byId("doc-content");
    const size = byId("doc-size");
    const save = byId("doc-save");
    const encoder = new TextEncoder();

    function updateSize() {
      const bytes = encoder.encode(content.value).length;
      size.textContent = `${bytes} / ${DOCUMENT_LIMIT_BYTES} bytes`;
      size.classList.toggle("error", bytes > DOCUMENT_LIMIT_BYTES);
    }

    async function reload() {
      setStatus("doc-status", `loading ${name.value}`);
      try {
        const answer = await apiJson("GET", `/v1/agents/main/files/${encodeURIComponent(name.value)}`);
        content.value = answer.content;
        updateSize();
        setStatus("doc-status", `loaded ${answer.name}`);
      } catch (error) {
        setStatus("doc-status", error.describe(), true);
      }
    }

    // One attempt only: an UNKNOWN_OUTCOME answer asks the user to reload, and nothing here
    // sends the write again by itself.
    async function store() {
      if (save) save.disabled = true;
      setStatus("doc-status", `saving ${name.value}`);
      try {
        const answer = await apiJson(
          "PUT",
          `/v1/agents/main/files/${encodeURIComponent(name.value)}`,
          { content: content.value },
        );
        setStatus("doc-status", `saved ${answer.name} (${answer.size} bytes)`);
      } catch (error) {
        if (error.code === "UNKNOWN_OUTCOME") {
          setStatus(
            "doc-status",
            `${error.describe()} — the save may or may not have happened; press Reload to see what the file holds now.`,
            true,
          );
        } else {
          setStatus("doc-status", `not saved: ${error.describe()}`, true);
        }
      } finally {
        if (save) save.disabled = false;
      }
    }

    content.addEventListener("input", updateSize);
    name.addEventListener("change", reload);
    byId("doc-reload").addEventListener("click", reload);
    byId("doc-form").addEventListener("submit", (event) => {
      event.preventDefault();
      if (save) store();
    });
    reload();
  }

  // ---- Nodes ---------------------------------------------------------------------------

  function nodesPage() {
    async function load() {
      try {
        const answer = await apiJson("GET", "/v1/nodes");
        const rows = answer.nodes.map((node) =>
          el(
            "tr",
            {},
            el("td", { className: "mono" }, node.nodeId),
            el("td", {}, node.displayName),
            el("td", {}, node.connected ? "connected" : "not connected"),
            el("td", {}, node.runtime),
            el(
              "td",
              {},
              node.workerCapacity === undefined
                ? "—"
                : `${node.workerSlotsInUse} of ${node.workerCapacity} worker slots in use`,
            ),
            el("td", {}, el("details", {}, el("summary", {}, `${node.commands.length} commands`), el("p", { className: "mono" }, node.commands.join(", ")))),
            el("td", {}, formatMs(node.lastSeenAt)),
          ),
        );
        byId("nodes").querySelector("tbody").replaceChildren(...rows);
        setStatus("nodes-status", `${answer.nodes.length} enrolled`);
      } catch (error) {
        setStatus("nodes-status", error.describe(), true);
      }
    }
    const form = byId("setup-code-form");
    if (form) {
      form.addEventListener("submit", async (event) => {
        event.preventDefault();
        try {
          const ttl = Number(byId("setup-ttl").value);
          const answer = await apiJson("POST", "/v1/nodes/setup-codes", ttl > 0 ? { ttlSeconds: ttl } : {});
          byId("setup-code").value = answer.setupCode;
          setStatus("nodes-status", `setup code valid until ${formatMs(answer.expiresAtMs)}`);
        } catch (error) {
          setStatus("nodes-status", error.describe(), true);
        }
      });
    }
    load();
  }

  // ---- Memory --------------------------------------------------------------------------

  function memoryPage() {
    async function loadStatus() {
      try {
        const status = await apiJson("GET", "/v1/memory/status");
        const entries = [
          ["Files", status.files],
          ["Chunks", status.chunks],
          ["Vectors", status.vectors],
          ["Embedder", status.configured],
          ["Vector search", status.vectorSearch],
          ["Stale", status.stale ? "yes (the Harness is away)" : "no"],
          ["Warnings", status.warnings.length ? status.warnings.join("; ") : "none"],
        ];
        byId("memory-index").replaceChildren(
          ...entries.flatMap(([term, value]) => [el("dt", {}, term), el("dd", {}, value)]),
        );
      } catch (error) {
        setStatus("memory-status", error.describe(), true);
      }
    }

    byId("memory-search").addEventListener("submit", async (event) => {
      event.preventDefault();
      const query = new URLSearchParams({ q: byId("memory-query").value, limit: byId("memory-limit").value || "10" });
      try {
        const answer = await apiJson("GET", `/v1/memory/search?${query}`);
        byId("memory-results").replaceChildren(
          ...answer.results.map((hit) =>
            el(
              "li",
              { className: "hit" },
              el("div", {}, el("cite", {}, hit.citation), ` score ${Number(hit.score).toPrecision(3)}`),
              el("pre", { className: "content" }, hit.snippet),
            ),
          ),
        );
        const notes = [`${answer.results.length} results (${answer.mode})`];
        if (answer.stale) notes.push("stale: the Harness is away");
        notes.push(...answer.warnings);
        setStatus("memory-status", notes.join("; "));
      } catch (error) {
        setStatus("memory-status", error.describe(), true);
      }
    });

    const reindex = byId("memory-reindex");
    if (reindex) {
      reindex.addEventListener("click", async () => {
        reindex.disabled = true;
        const progress = byId("memory-progress");
        setStatus("memory-status", "reindexing");
        try {
          const response = await api("POST", "/v1/memory/reindex");
          const reader = response.body.getReader();
          const decoder = new TextDecoder();
          let pending = "";
          for (;;) {
            const { value, done } = await reader.read();
            if (done) break;
            pending += decoder.decode(value, { stream: true });
            const lines = pending.split("\n");
            pending = lines.pop();
            for (const line of lines.filter(Boolean)) {
              const step = JSON.parse(line);
              if (step.error) {
                setStatus("memory-status", `reindex failed: ${step.error.code}: ${step.error.message}`, true);
              } else if (step.status) {
                progress.max = 1;
                progress.value = 1;
                setStatus("memory-status", `reindexed ${step.status.files} files`);
              } else {
                progress.max = Math.max(step.total, 1);
                progress.value = step.done;
                setStatus("memory-status", `reindexing: ${step.done} of ${step.total} files`);
              }
            }
          }
          loadStatus();
        } catch (error) {
          setStatus("memory-status", `reindex failed: ${error.describe()}`, true);
        } finally {
          reindex.disabled = false;
        }
      });
    }
    loadStatus();
  }

  // ---- Skills --------------------------------------------------------------------------

  function skillsPage() {
    apiJson("GET", "/v1/skills")
      .then((answer) => {
        byId("skills").querySelector("tbody").replaceChildren(
          ...answer.skills.map((skill) =>
            el(
              "tr",
              {},
              el("td", {}, skill.name),
              el("td", {}, skill.host),
              el("td", {}, skill.tier),
              el("td", {}, skill.gatedOut.length ? `no: ${skill.gatedOut.join("; ")}` : "yes"),
              el("td", {}, skill.shadowedBy || "—"),
              el("td", {}, skill.description),
            ),
          ),
        );
        byId("skills-skipped").replaceChildren(
          ...answer.skipped.map((skipped) => el("li", {}, `${skipped.host}: ${skipped.path}: ${skipped.reason}`)),
        );
        setStatus("skills-status", [`${answer.skills.length} skills`, ...answer.warnings].join("; "));
      })
      .catch((error) => setStatus("skills-status", error.describe(), true));
  }

  // ---- Audit ---------------------------------------------------------------------------

  function auditPage() {
    // The events loaded so far, newest first; older ones are read `before=` the oldest loaded
    // when the Older button passes the last loaded page.
    let events = [];
    let pageIndex = 0;
    let olderOnServer = true;

    function filtered() {
      const action = byId("audit-action").value.trim();
      const actor = byId("audit-actor").value.trim();
      return events.filter(
        (event) => (!action || event.action === action) && (!actor || event.actor.includes(actor)),
      );
    }

    function render() {
      const shown = filtered();
      const pages = Math.max(1, Math.ceil(shown.length / AUDIT_PAGE_SIZE));
      pageIndex = Math.min(pageIndex, pages - 1);
      const slice = shown.slice(pageIndex * AUDIT_PAGE_SIZE, (pageIndex + 1) * AUDIT_PAGE_SIZE);
      byId("audit").querySelector("tbody").replaceChildren(
        ...slice.map((event) =>
          el(
            "tr",
            {},
            el("td", {}, event.seq),
            el("td", {}, formatMs(event.at)),
            el("td", {}, event.actor),
            el("td", {}, event.action),
            el("td", {}, event.outcome),
            el("td", {}, event.reasonCode || "—"),
            el("td", {}, el("code", {}, JSON.stringify(event.details))),
          ),
        ),
      );
      const more = olderOnServer ? "; older events on the server" : "";
      byId("audit-page").textContent = `page ${pageIndex + 1} of ${pages} (${shown.length} events${more})`;
      byId("audit-newer").disabled = pageIndex === 0;
      byId("audit-older").disabled = pageIndex >= pages - 1 && !olderOnServer;
    }

    // Reads the API page before `before` and appends it to the loaded events.
    async function loadBefore(before) {
      const answer = await apiJson("GET", `/v1/audit?before=${before}&limit=${AUDIT_API_PAGE}`);
      events.push(...answer.events.reverse());
      olderOnServer = answer.events.length === AUDIT_API_PAGE;
      const actions = Array.from(new Set(events.map((event) => event.action))).sort();
      byId("audit-actions").replaceChildren(...actions.map((action) => el("option", { value: action })));
    }

    async function load() {
      try {
        await loadBefore(AUDIT_NEWEST);
        render();
      } catch (error) {
        setStatus("audit-status", error.describe(), true);
      }
    }

    // Shows the next older page, reading older events from the server once the loaded ones
    // are all shown.
    async function older() {
      try {
        const pages = Math.ceil(filtered().length / AUDIT_PAGE_SIZE);
        if (pageIndex >= pages - 1 && olderOnServer && events.length > 0) {
          await loadBefore(events[events.length - 1].seq);
        }
        pageIndex += 1;
        render();
      } catch (error) {
        setStatus("audit-status", error.describe(), true);
      }
    }

    byId("audit-filter").addEventListener("submit", (event) => {
      event.preventDefault();
      pageIndex = 0;
      render();
    });
    byId("audit-newer").addEventListener("click", () => {
      pageIndex -= 1;
      render();
    });
    byId("audit-older").addEventListener("click", older);
    load();
  }

  // ---- API keys ------------------------------------------------------------------------

  function keysPage() {
    async function load() {
      try {
        const answer = await apiJson("GET", "/v1/keys");
        byId("keys").querySelector("tbody").replaceChildren(
          ...answer.keys.map((key) =>
            el(
              "tr",
              {},
              el("td", {}, key.name),
              el("td", {}, key.scopes.join(", ")),
              el("td", {}, key.sessions || "—"),
              el("td", {}, key.expiresAtMs ? formatMs(key.expiresAtMs) : "never"),
              el("td", {}, key.lastUsedAtMs ? formatMs(key.lastUsedAtMs) : "—"),
              el(
                "td",
                {},
                el(
                  "button",
                  {
                    type: "button",
                    "aria-label": `Revoke ${key.name}`,
                    onclick: async () => {
                      try {
                        await apiJson("DELETE", `/v1/keys/${encodeURIComponent(key.name)}`);
                        setStatus("keys-status", `revoked ${key.name}`);
                        load();
                      } catch (error) {
                        setStatus("keys-status", error.describe(), true);
                      }
                    },
                  },
                  "Revoke",
                ),
              ),
            ),
          ),
        );
      } catch (error) {
        setStatus("keys-status", error.describe(), true);
      }
    }
    byId("key-form").addEventListener("submit", async (event) => {
      event.preventDefault();
      const chosen = Array.from(document.querySelectorAll('#key-form input[name="scope"]:checked'), (box) => box.value);
      const body = { name: byId("key-name").value, scopes: chosen };
      const prefix = byId("key-sessions").value;
      if (prefix) body.sessions = prefix;
      try {
        const created = await apiJson("POST", "/v1/keys", body);
        byId("key-secret").value = created.key;
        setStatus("keys-status", `created ${created.name}; copy the key now, it is not shown again`);
        load();
      } catch (error) {
        setStatus("keys-status", error.describe(), true);
      }
    });
    load();
  }

  // ---- Channels ------------------------------------------------------------------------

  function channelsPage() {
    const decide = async (channel, code, approve) => {
      const base = `/v1/channels/${encodeURIComponent(channel)}/pairings/${encodeURIComponent(code)}`;
      try {
        const answer = approve ? await apiJson("POST", `${base}/approve`) : await apiJson("DELETE", base);
        setStatus("channels-status", `${approve ? "approved" : "denied"} ${answer.sender} on ${channel}`);
        load();
      } catch (error) {
        setStatus("channels-status", error.describe(), true);
      }
    };
    async function load() {
      try {
        const answer = await apiJson("GET", "/v1/channels");
        byId("channels").querySelector("tbody").replaceChildren(
          ...answer.channels.map((channel) =>
            el(
              "tr",
              {},
              el("td", {}, channel.name),
              el("td", {}, channel.kind),
              el("td", {}, channel.agent),
              el("td", {}, channel.state),
              el("td", {}, String(channel.pendingDeliveries)),
              el("td", {}, channel.lastInboundAt ? formatMs(channel.lastInboundAt) : "—"),
              el("td", {}, channel.lastDeliveryAt ? formatMs(channel.lastDeliveryAt) : "—"),
              el("td", {}, channel.lastError ? `${channel.lastError.code}: ${channel.lastError.message}` : "—"),
            ),
          ),
        );
        const pairings = byId("pairings");
        if (!pairings) return;
        const rows = [];
        for (const channel of answer.channels) {
          const listed = await apiJson("GET", `/v1/channels/${encodeURIComponent(channel.name)}/pairings`);
          for (const pairing of listed.pairings) {
            const button = (label, approve) =>
              el(
                "button",
                {
                  type: "button",
                  "aria-label": `${label} ${pairing.code}`,
                  onclick: () => decide(channel.name, pairing.code, approve),
                },
                label,
              );
            rows.push(
              el(
                "tr",
                {},
                el("td", {}, channel.name),
                el("td", { class: "mono" }, pairing.code),
                el("td", {}, pairing.sender),
                el("td", {}, formatMs(pairing.expiresAtMs)),
                el("td", {}, button("Approve", true), " ", button("Deny", false)),
              ),
            );
          }
        }
        pairings.querySelector("tbody").replaceChildren(...rows);
      } catch (error) {
        setStatus("channels-status", error.describe(), true);
      }
    }
    load();
  }

  const pages = {
    chat: chatPage,
    documents: documentsPage,
    nodes: nodesPage,
    memory: memoryPage,
    skills: skillsPage,
    audit: auditPage,
    keys: keysPage,
    channels: channelsPage,
  };

  localizeTimes();
  labelTables();
  const start = pages[document.body.dataset.page];
  if (start) start();
  document.body.dataset.ready = scopes.length ? "true" : "login";
})();
