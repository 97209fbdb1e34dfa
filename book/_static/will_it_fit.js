// "Will it fit?": bertmem's planner in the browser. The data (will_it_fit_data.js, window.BERTMEM_FIT) holds, for
// every configuration, the estimated step's peak as lines in the micro-batch b (bytes = fixed + b * per example);
// this script runs the planner's search on them, as `bertmem plan` does. Nothing is loaded from the network.
(function () {
  "use strict";
  const PHASES = ["forward", "backward", "optimizer"];
  const GIB = 2 ** 30;
  const OPTIMIZERS = { adamw: "AdamW", adamw8bit: "8-bit AdamW", adafactor: "Adafactor" };
  const ADAPTATIONS = { full: "every weight", lora: "LoRA adapters", freeze: "the upper layers (lower ones frozen)" };
  const PARTS = [
    ["weights", "weights"],
    ["gradients", "gradients"],
    ["state", "optimizer state"],
    ["activations", "activations and temporaries"],
    ["margin", "allocator margin"],
    ["context", "CUDA context"],
  ];

  function data() {
    if (!window.BERTMEM_FIT) throw new Error("will_it_fit_data.js did not load");
    return window.BERTMEM_FIT;
  }

  function gib(bytes) {
    return (bytes / GIB).toFixed(2);
  }

  function modelOf(id) {
    const model = data().models.find((m) => m.id === id);
    if (!model) throw new Error("unknown checkpoint " + id);
    return model;
  }

  function cardOf(key) {
    const card = data().cards.find((c) => c.key === key);
    if (!card) throw new Error("unknown card " + key);
    return card;
  }

  // Bytes from "11 GiB", "11264MiB" (as nvidia-smi prints a total) or "16 GB", as `--memory` reads them
  // (bertmem.memory.cards.parse_memory); null without a unit, which the page asks for rather than guessing.
  const UNITS = { b: 1, kb: 1e3, mb: 1e6, gb: 1e9, tb: 1e12, kib: 2 ** 10, mib: 2 ** 20, gib: 2 ** 30, tib: 2 ** 40 };
  // The listed card a typed name names ("t4", "A100"), else undefined: --memory takes the names too.
  function namedCard(textValue) {
    return data().cards.find((c) => c.key === String(textValue || "").trim().toLowerCase());
  }

  function parseMemory(textValue) {
    const named = namedCard(textValue);
    if (named) return { bytes: named.memory, flag: named.key }; // a card's name, as --memory takes it
    const match = /^\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]+)\s*$/.exec(String(textValue || ""));
    if (!match || !(match[2].toLowerCase() in UNITS)) return null;
    const bytes = Math.trunc(parseFloat(match[1]) * UNITS[match[2].toLowerCase()]);
    return bytes > 0 ? { bytes, flag: match[1] + match[2] } : null;
  }

  // The card of a choice: one of the table's, or the reader's own ("custom": its memory as typed, any precision).
  function cardFor(choice) {
    if (choice.card !== "custom") return cardOf(choice.card);
    const named = namedCard(choice.memory);
    if (named) return Object.assign({}, named, { flag: named.key }); // a card's name: that card, its speed too
    const memory = parseMemory(choice.memory);
    if (!memory) throw new Error("write the memory with its unit: 11 GiB, or 11264MiB as nvidia-smi prints it");
    return { key: "custom", name: "your card", memory: memory.bytes, bf16: true, flag: memory.flag };
  }

  function precisions(card) {
    return card.bf16 ? ["fp32", "fp16", "bf16"] : ["fp32", "fp16"];
  }

  // One member of a family the data stores for a LoRA rank or a number of frozen layers
  // (bertmem.book.fit_page.expand): the estimate itself where stored, else its segment's first member plus one
  // step per member (a segment is a run of members that were estimated, or a step checked against one that was).
  function expand(family, value) {
    const stored = family.direct[String(value)];
    if (stored !== undefined) return stored;
    const segment = family.segments.find((s) => s.low <= value && value <= s.high);
    if (!segment) throw new Error("no estimate for member " + value);
    const add = (base, step) => (Array.isArray(base) ? base.map((x, i) => add(x, step[i]))
      : typeof base === "object" ? Object.fromEntries(Object.keys(base).map((k) => [k, add(base[k], step[k])]))
        : base + (value - segment.low) * step);
    return add(segment.base, segment.step);
  }

  // The member of the adaptation a choice names: its LoRA rank, or its number of frozen layers.
  function member(choice) {
    return choice.adaptation === "lora" ? choice.rank : choice.frozen;
  }

  // The estimated tensor peak of one step at micro-batch b, and what is alive at that moment.
  function peakAt(entry, facts, b) {
    if (b === 1 && entry.one) entry = entry.one; // estimated on its own where one example is off the lines
    let best = null;
    for (const [fixed, perExample, weights, gradients, phase] of entry.lines) {
      const value = fixed + b * perExample;
      if (best === null || value > best.value) best = { value, weights, gradients, phase };
    }
    const [fixed, perExample, weights, gradients] = entry.end;
    const [state, rise] = facts;
    const optimizer = fixed + b * perExample + rise; // the optimizer's own step, on top of the end of backward
    if (optimizer > best.value) best = { value: optimizer, weights, gradients, phase: 2 };
    return { peak: best.value + state, weights: best.weights, gradients: best.gradients, state,
             phase: PHASES[best.phase] };
  }

  // What `bertmem plan` answers for a choice: {fits, largest (searched to max_batch), largest_capped (as the
  // command searches: to the effective batch), micro_batch, accumulation_steps, estimated_peak_bytes, ...}.
  function answer(choice) {
    const d = data();
    const model = modelOf(choice.model);
    const card = cardFor(choice);
    const precision = choice.precision === "fp32" ? "fp32" : "bf16"; // fp16 and bf16 hold the same bytes
    const key = [choice.model, choice.length, precision, choice.attention, choice.checkpointing ? 1 : 0,
      choice.adaptation].join("|");
    const stored = d.peaks[key];
    if (!stored) throw new Error("no estimate for " + key);
    const full = choice.adaptation === "full";
    const entry = full ? stored : expand(stored, member(choice));
    const byOptimizer = model.optimizers[choice.optimizer][choice.adaptation];
    const facts = full ? byOptimizer : expand(byOptimizer, member(choice));
    const needed = (peak) => Math.floor(peak * (1 + d.margin)) + d.context;
    const fits = (b) => needed(peakAt(entry, facts, b).peak) <= card.memory;
    const effective = Math.max(1, Math.floor(choice.effective_batch));
    const out = { fits: fits(1), memory_bytes: card.memory, effective_batch: effective };
    if (!out.fits) {
      out.one_example_bytes = needed(peakAt(entry, facts, 1).peak);
      return out;
    }
    let largest = 1;
    while (largest < d.max_batch && fits(largest + 1)) largest += 1;
    out.largest = largest;
    out.largest_capped = Math.min(largest, Math.min(d.max_batch, Math.max(effective, 2)));
    const micro = largestDivisor(effective, largest);
    out.micro_batch = micro;
    out.accumulation_steps = effective / micro;
    out.nearby = splitAdvice(effective, out.largest_capped);
    const at = peakAt(entry, facts, micro);
    out.estimated_peak_bytes = needed(at.peak);
    out.peak_phase = at.phase;
    out.breakdown = {
      weights: at.weights, gradients: at.gradients, state: at.state,
      activations: at.peak - at.weights - at.gradients - at.state,
      margin: Math.floor(at.peak * d.margin), context: d.context,
    };
    return out;
  }

  // The largest micro-batch up to `limit` that divides the effective batch (bertmem.memory.planner).
  function largestDivisor(effective, limit) {
    let micro = 1;
    for (let m = 1; m <= Math.min(limit, effective); m += 1) if (effective % m === 0) micro = m;
    return micro;
  }

  // Where the effective batch splits poorly (its largest divisor that fits is under half of what fits, up to
  // the effective batch), the nearest batches below and above that split well; else [] (`split_advice`).
  function splitAdvice(effective, largest) {
    const limit = Math.min(largest, effective);
    const split = (batch) => {
      const micro = largestDivisor(batch, limit);
      return { effective_batch: batch, micro_batch: micro, accumulation_steps: batch / micro };
    };
    const well = (batch) => 2 * split(batch).micro_batch >= Math.min(limit, batch);
    if (well(effective)) return [];
    const found = [];
    for (let b = effective - 1; b > 0; b -= 1) if (well(b)) { found.push(split(b)); break; }
    for (let b = effective + 1; b < 2 * effective + 2; b += 1) if (well(b)) { found.push(split(b)); break; }
    return found;
  }

  // The commands that answer this choice: `bertmem plan` prints this answer, `bertmem train` runs it on a file
  // (planning again for the file's longest batch, never longer than --max-length).
  function commands(choice) {
    const card = cardFor(choice);
    const flags = ["--model", choice.model, "--memory", card.flag || card.key, "--max-length", String(choice.length),
      "--precision", choice.precision, "--attention", choice.attention];
    if (choice.checkpointing) flags.push("--gradient-checkpointing");
    flags.push("--optimizer", choice.optimizer);
    if (choice.adaptation === "lora") flags.push("--lora-r", String(choice.rank));
    if (choice.adaptation === "freeze") flags.push("--freeze-layers", String(choice.frozen));
    flags.push("--effective-batch", String(choice.effective_batch));
    const epoch = ["--train-size", String(choice.examples)];
    if (choice.tokens !== null) epoch.push("--tokens-per-example", String(choice.tokens));
    return {
      plan: ["bertmem plan", ...flags, ...epoch].join(" "),
      // bertmem.memory.planner.Plan.train_command prints the same (tests/test_site_browser.py)
      train: ["bertmem train --dataset YOUR_FILE.csv --output-dir runs/mine --recipe book", ...flags,
        "--micro-batch auto"].join(" "),
    };
  }

  function withArticle(name) {
    return ("AEFHILMNORSX".includes(name.charAt(0).toUpperCase()) ? "an " : "a ") + name;
  }

  // IMDb's mean tokens per training review cut at `length` (bertmem.memory.speed.book_tokens_per_example).
  function bookTokens(length) {
    let tokens = 0;
    let examples = 0;
    for (const [n, count] of data().epoch.counts) {
      tokens += Math.min(n, length) * count;
      examples += count;
    }
    return tokens / examples;
  }

  // What one training example of `tokens` tokens costs the chosen model and member, as the time estimate counts
  // it (bertmem.memory.speed.ModelWork.example_flops): its matrix multiplies (chapter 5's count,
  // bertmem.model.matmuls.MatmulShape), forward and backward, and with gradient checkpointing the forward of
  // the layers backward reaches once more; or the fallback 6 · non-embedding parameters · tokens where the count
  // does not cover the model (its row is null): Kaplan et al.'s 6N, whose N (entry.non_embedding) leaves out the
  // embeddings, which multiply nothing. The data name each row's numbers (work.fields).
  function workOf(choice) {
    const work = data().work;
    const entry = work.models[choice.model];
    const row = choice.adaptation === "full" ? entry.full : entry[choice.adaptation][String(member(choice))];
    const w = row === null ? null : Object.fromEntries(work.fields.map((name, i) => [name, row[i]]));
    return {
      counted: w !== null,
      flops(tokens, checkpointing) {
        const n = entry.non_embedding;
        if (w === null) return 6.0 * n * tokens + (checkpointing ? 2.0 * n * tokens : 0.0);
        const linear = 2 * w.per_token * tokens + 2 * w.per_example; // forward: 2 FLOPs per weight and token
        const attention = 4 * entry.hidden * (tokens * tokens); // forward, per layer: QKᵀ and AV
        const weightGradients = 2 * w.per_token_trained * tokens + 2 * w.per_example_trained;
        // backward down to the lowest layer a gradient reaches; attention's products: twice their forward
        const inputGradients = 2 * (w.per_token - w.frozen_below_per_token) * tokens + 2 * w.per_example;
        const through = entry.layers - w.frozen_below;
        const training = linear + inputGradients + weightGradients + attention * (entry.layers + 2 * through);
        // checkpointing runs the forward of the layers backward reaches once more (recompute_flops)
        const recompute = 2 * (w.per_token - w.frozen_below_per_token) * tokens + attention * through;
        return checkpointing ? training + recompute : training;
      },
    };
  }

  // The estimated time per epoch, as `bertmem plan` prints it (bertmem.memory.speed.epoch_estimate): each
  // micro-step the larger of its matmul FLOPs over the card's training rate and A3's measured floor.
  // null for a card typed as a size (its speed is unknown) or a plan that does not fit.
  function epochEstimate(choice, result) {
    const card = result.fits ? cardFor(choice) : null;
    if (!card || !card.rates) return null; // no plan, or a card typed as a size: no known speed
    const d = data();
    const rate = card.rates[choice.precision];
    if (!rate) return null; // a precision the card has no rate for (bf16 on a T4)
    const tokens = choice.tokens === null ? bookTokens(choice.length) : choice.tokens;
    const steps = Math.ceil(choice.examples / result.micro_batch);
    const work = workOf(choice);
    const compute = result.micro_batch * work.flops(tokens, choice.checkpointing) / (rate.tflops * 1e12);
    const floor = d.epoch.floor_s;
    const perStep = Math.max(compute, floor);
    const seconds = steps * perStep;
    const source = rate.tflops.toFixed(1) + " TFLOP/s, " + (rate.measured ? "a BERT fine-tune's published rate on it"
      : (100 * card.utilisation).toFixed(0) + "% of its datasheet peak (assumed)");
    const counted = work.counted ? "matmul FLOPs as chapter 5 counts them"
      : "6 · non-embedding parameters · tokens (the matmul count does not cover this model)";
    const basis = counted + " at " + source + "; no micro-step under A3's " + (1000 * floor).toFixed(0)
      + " ms, measured for bert-base at micro-batch 8 on an H200";
    const minutes = seconds / 60;
    const took = minutes >= 1 ? "about " + minutes.toFixed(0) + " min"
      : seconds >= 1 ? "about " + seconds.toFixed(0) + " s" : "under 1 s";
    const bound = compute >= floor ? "compute" : "per-step floor";
    return {
      seconds, micro_steps: steps, tokens_per_example: tokens,
      line: took + " per epoch on " + withArticle(card.name) + " (estimated: " + steps + " micro-steps of "
        + (1000 * perStep).toFixed(0) + " ms, " + bound + "-bound; " + basis + ")",
    };
  }

  // One change at a time: what each lever would do to the largest micro-batch.
  function alternatives(choice) {
    const model = modelOf(choice.model);
    const card = cardFor(choice);
    const half = card.bf16 ? "bf16" : "fp16";
    const out = [];
    const add = (label, change) => out.push({ label, choice: Object.assign({}, choice, change) });
    if (!choice.checkpointing) add("gradient checkpointing", { checkpointing: true });
    if (choice.attention !== "sdpa" && model.attentions.includes("sdpa")) add("SDPA attention", { attention: "sdpa" });
    if (choice.precision === "fp32") add(half + " mixed precision", { precision: half });
    for (const name of ["adamw8bit", "adafactor"]) {
      if (choice.optimizer !== name) add(OPTIMIZERS[name], { optimizer: name });
    }
    if (choice.adaptation !== "lora") add("LoRA adapters (r = " + choice.rank + ")", { adaptation: "lora" });
    if (choice.adaptation === "full") {
      add("freeze the lower " + choice.frozen + " of " + model.layers + " layers", { adaptation: "freeze" });
    }
    const shorter = model.lengths.filter((n) => n < choice.length);
    if (shorter.length) add(shorter[shorter.length - 1] + " tokens", { length: shorter[shorter.length - 1] });
    // the smallest listed card with at least a quarter more memory (a V100's 16 GiB is no step up from a T4's 15)
    const bigger = data().cards.filter((c) => c.memory >= 1.25 * card.memory).sort((a, b) => a.memory - b.memory)[0];
    if (bigger) {
      const precision = choice.precision === "bf16" && !bigger.bf16 ? "fp16" : choice.precision;
      add("the " + bigger.name, { card: bigger.key, precision });
    }
    return out.map((alt) => Object.assign(alt, { answer: answer(alt.choice) }));
  }

  function pairs(choice, singles) {
    const found = [];
    for (let i = 0; i < singles.length; i += 1) {
      for (let j = i + 1; j < singles.length; j += 1) {
        const changed = (alt) => Object.keys(alt.choice).filter((name) => alt.choice[name] !== choice[name]);
        const first = changed(singles[i]);
        const second = changed(singles[j]);
        if (second.some((name) => first.includes(name))) continue; // two values for one setting
        const merged = Object.assign({}, singles[i].choice);
        for (const name of second) merged[name] = singles[j].choice[name];
        let result;
        try {
          result = answer(merged);
        } catch (err) {
          continue; // a combination the data has no estimate for
        }
        if (result.fits) found.push({ label: singles[i].label + " + " + singles[j].label, answer: result });
      }
    }
    return found.sort((a, b) => b.answer.largest - a.answer.largest).slice(0, 5);
  }

  // ---- the page ----
  const $ = (id) => document.getElementById("wif-" + id);

  // Options for a select, keeping the wanted value where it is offered, else the nearest one below it (lengths),
  // else `fallback`, else the first.
  function fill(select, options, wanted, fallback) {
    const values = options.map((o) => String(o[0]));
    select.replaceChildren(...options.map(([value, label]) => new Option(label, String(value))));
    let value = String(wanted);
    if (!values.includes(value)) {
      const below = values.filter((v) => v !== "" && !Number.isNaN(Number(v)) && Number(v) <= Number(wanted));
      value = below.length ? below[below.length - 1] : values.includes(fallback) ? fallback : values[0];
    }
    select.value = value;
  }

  function current() {
    return {
      model: $("model").value, card: $("card").value, memory: $("memory").value.trim(),
      length: Number($("length").value),
      precision: $("precision").value, attention: $("attention").value,
      checkpointing: $("checkpointing").value === "1", optimizer: $("optimizer").value,
      adaptation: $("adaptation").value, rank: Number($("rank").value), frozen: Number($("frozen").value),
      effective_batch: Math.min(4096, Math.max(1, Math.floor(Number($("batch").value)) || 1)),
      // an empty or unreadable count is IMDb's (the placeholder says so); at most a billion examples
      examples: Number($("examples").value) >= 1 ? Math.min(1e9, Math.floor(Number($("examples").value)))
        : data().epoch.examples,
      tokens: $("tokens").value.trim() === "" || !(Number($("tokens").value) > 0) ? null : Number($("tokens").value),
    };
  }

  // What the reader last chose for the settings whose options depend on the model or the card: kept when an
  // option disappears (bf16 on a T4, SDPA for DeBERTa, 8,192 tokens for BERT) and restored when it comes back.
  // Until the reader picks a precision, the page follows the book's recipe for the card: its 16-bit format
  // (fp16 on a T4, bf16 where the card has bf16 tensor cores) with SDPA.
  // A LoRA rank and a number of frozen layers are kept the same way (null: the page's default, r = 8 and the
  // lower half).
  const wanted = { length: 512, precision: null, attention: "sdpa", rank: null, frozen: null };

  function refreshOptions() {
    const model = modelOf($("model").value);
    const custom = $("card").value === "custom";
    const typed = namedCard($("memory").value);
    const card = custom ? typed || { bf16: true } : cardOf($("card").value);
    $("memory-field").hidden = !custom;
    fill($("length"), model.lengths.map((n) => [n, n.toLocaleString("en-US")]), wanted.length);
    const recipe = card.bf16 ? "bf16" : "fp16";
    fill($("precision"), precisions(card).map((p) => [p, p]), wanted.precision || recipe, "fp16");
    fill($("attention"), model.attentions.map((a) => [a, a === "sdpa" ? "SDPA (fused)" : "eager"]),
      wanted.attention);
    fill($("rank"), data().lora_ranks.map((r) => [r, String(r)]), wanted.rank || data().lora_rank);
    const counts = Array.from({ length: model.layers - 1 }, (_, i) => i + 1); // one to all but the top layer
    fill($("frozen"), counts.map((n) => [n, n + " of " + model.layers]), wanted.frozen || model.frozen_layers);
    $("rank-field").hidden = $("adaptation").value !== "lora";
    $("frozen-field").hidden = $("adaptation").value !== "freeze";
  }

  function text(tag, content, className) {
    const node = document.createElement(tag);
    node.textContent = content;
    if (className) node.className = className;
    return node;
  }

  function render() {
    refreshOptions();
    const choice = current();
    keepInUrl(choice);
    const model = modelOf(choice.model);
    let card;
    try {
      card = cardFor(choice);
    } catch (err) {
      $("verdict").className = "wif-verdict wif-no";
      $("verdict").textContent = err.message.charAt(0).toUpperCase() + err.message.slice(1) + ".";
      for (const id of ["plan", "split", "time", "time-check", "levers", "accelerate"]) $(id).textContent = "";
      for (const id of ["bar", "parts"]) $(id).replaceChildren();
      $("commands").hidden = true;
      $("answer").dataset.state = "no-memory";
      return;
    }
    const result = answer(choice);
    const d = data();
    const verdict = $("verdict");
    const plan = $("plan");
    verdict.className = result.fits ? "wif-verdict wif-yes" : "wif-verdict wif-no";
    if (result.fits) {
      verdict.textContent = "Estimated to fit, for one training step. Largest micro-batch: " + result.largest
        + (result.largest >= data().max_batch ? " (searched up to " + data().max_batch + ")" : "") + ".";
      plan.textContent = "For an effective batch of " + result.effective_batch + ": micro-batch "
        + result.micro_batch + " × " + result.accumulation_steps + " accumulation step"
        + (result.accumulation_steps === 1 ? "" : "s") + ". Estimated peak " + gib(result.estimated_peak_bytes)
        + " GiB of the card's " + gib(card.memory) + " GiB, during " + result.peak_phase + ".";
    } else {
      verdict.textContent = "Estimated not to fit: for one training step, one example is estimated to need "
        + gib(result.one_example_bytes)
        + " GiB; " + (card.key === "custom" ? "" : "the ")
        + card.name + " has " + gib(card.memory) + " GiB.";
      plan.textContent = "";
    }
    $("split").textContent = result.fits && result.nearby.length ? "Effective batch " + result.effective_batch
      + " splits poorly: micro-batches of " + result.micro_batch + " where "
      + Math.min(result.largest_capped, result.effective_batch) + " fit; "
      + result.nearby.map((s) => s.effective_batch + " (" + s.micro_batch + " × " + s.accumulation_steps + ")")
        .join(" or ") + " split well. (A ragged split would give the same gradient with chapter 2's per-example "
      + "weights; bertmem train splits evenly.)" : "";
    const epoch = epochEstimate(choice, result);
    const noTime = !card.rates ? "a budget given as a size has no known speed; choose the listed card nearest yours"
      : withArticle(card.name) + " has no " + choice.precision + " rate";
    $("time").textContent = epoch ? "Time: " + epoch.line + "." : result.fits ? "Time: no estimate: " + noTime + "."
      : "";
    const checked = d.epoch.checked;
    const rate = epoch ? card.rates[choice.precision] : null; // a measured rate says what it rests on
    $("time-check").textContent = epoch ? "Held against the " + checked.runs + " training times the book holds "
      + "and can estimate (left out: " + checked.left_out + "), such estimates came to " + checked.low.toFixed(2)
      + "–" + checked.high.toFixed(2) + " × the measured time (median " + checked.median.toFixed(2) + "); all "
      + checked.runs + " were " + checked.scope + "; for any other choice the spread is untested."
      + (rate.note ? " " + rate.note.charAt(0).toUpperCase() + rate.note.slice(1) + "." : "") : "";
    $("tokens").placeholder = "IMDb's: " + bookTokens(choice.length).toFixed(1);
    $("examples").placeholder = "IMDb's: " + data().epoch.examples;
    const lines = commands(choice);
    $("copy").textContent = "Copy";
    $("plan-command").textContent = lines.plan;
    $("train-command").textContent = lines.train;
    $("commands").hidden = false;
    drawBar(result, card);
    drawLevers(choice, result);
    drawAccelerate(choice, model, result);
    $("answer").dataset.state = result.fits ? "fits" : "no-fit";
  }

  function drawBar(result, card) {
    const bar = $("bar");
    const table = $("parts");
    bar.replaceChildren();
    table.replaceChildren();
    if (!result.fits) return;
    for (const [part, label] of PARTS) {
      const bytes = result.breakdown[part];
      const share = (100 * bytes) / card.memory;
      const piece = document.createElement("span");
      piece.className = "wif-part wif-" + part;
      piece.style.width = share.toFixed(3) + "%";
      piece.title = label + ": " + gib(bytes) + " GiB";
      bar.appendChild(piece);
      const row = document.createElement("tr");
      const key = document.createElement("td");
      key.appendChild(text("span", "", "wif-key wif-" + part));
      key.appendChild(document.createTextNode(" " + label));
      row.appendChild(key);
      row.appendChild(text("td", gib(bytes) + " GiB", "wif-num"));
      table.appendChild(row);
    }
    const free = document.createElement("span");
    free.className = "wif-part wif-free";
    free.style.flexGrow = "1";
    free.title = "free";
    bar.appendChild(free);
  }

  function drawLevers(choice, result) {
    const list = $("levers");
    list.replaceChildren();
    const singles = alternatives(choice);
    for (const alt of singles) {
      const r = alt.answer;
      const said = r.fits ? "largest micro-batch " + r.largest : "does not fit (one example: "
        + gib(r.one_example_bytes) + " GiB)";
      list.appendChild(text("li", alt.label + ": " + said, r.fits ? "wif-yes" : "wif-no"));
    }
    if (!result.fits && !singles.some((alt) => alt.answer.fits)) {
      const two = pairs(choice, singles);
      for (const p of two) list.appendChild(text("li", p.label + ": largest micro-batch " + p.answer.largest,
        "wif-yes"));
      if (!two.length) list.appendChild(text("li", "no two of these changes together make it fit", "wif-no"));
    }
  }

  function drawAccelerate(choice, model, result) {
    const a = model.accelerate;
    const row = choice.precision === "fp32" ? ["float32", a.adam_fp32] : ["float16", a.adam_fp16];
    const ours = result.fits ? "bertmem's peak at micro-batch " + result.micro_batch + ": "
      + gib(result.estimated_peak_bytes) + " GiB, of which activations and temporaries "
      + gib(result.breakdown.activations) + " GiB" : "bertmem: one example does not fit";
    $("accelerate").textContent = "accelerate estimate-memory " + choice.model + ": weights " + gib(a.weights)
      + " GiB; \"Training using Adam\" (" + row[0] + " row) " + gib(row[1]) + " GiB, the same for any batch and "
      + "length. " + ours + ".";
  }

  function validation() {
    const v = data().validation;
    if (!v) return;
    $("validation").textContent = "These are estimates. Held against " + v.readings + " published GPU memory "
      + "readings (all " + v.readings_of + "; " + v.fit_readings + " of them used to fit the "
      + "allocator margin), the planner's answers came to " + v.ratio_low.toFixed(2) + "–" + v.ratio_high.toFixed(2)
      + " × the reading (" + v.held_low.toFixed(2) + "–" + v.held_high.toFixed(2) + " on the others), and it "
      + "agreed with " + v.checks_agreeing + " of " + v.checks + " other published runs (" + v.checks_of + "). "
      + "On the " + v.gpu_card + " of appendix A3 the planner's defaults were short on " + v.gpu_short + " of "
      + v.gpu_shapes + " measured shapes"
      + (v.gpu_short ? ", by up to " + (100 * v.gpu_short_most).toFixed(1) + " % of what the process used" : "")
      + " (" + v.gpu_short_with_context + " with each shape's measured CUDA context "
      + "in place of the assumed one); the context there took " + Math.round(v.gpu_context_low_mib) + "–"
      + Math.round(v.gpu_context_high_mib) + " MiB against the " + Math.round(v.assumed_context_mib)
      + " MiB assumed. "
      + "Each answer is for one training step, and A3's measured shapes were single steps too; A3's whole run of "
      + "chapter 5's recipe (training and evaluation) peaked at " + v.gpu_run.run_peak_gib.toFixed(2) + " GiB "
      + "allocated against " + v.gpu_run.step_peak_gib.toFixed(2) + " GiB for one step of its nominal shape ("
      + (v.gpu_run.run_over_step >= 0 ? "+" : "−") + Math.round(100 * Math.abs(v.gpu_run.run_over_step)) + " %): "
      + "with the measured context it needed at least " + v.gpu_run.run_needed_gib.toFixed(2) + " GiB, where the "
      + "planner's defaults ask " + v.gpu_run.planner_asks_gib.toFixed(2) + " GiB: "
      + (v.gpu_run.planner_short ? "short" : "enough, before the allocator's slack") + ". "
      + "The command's --cuda-context and --allocator-margin set the context and the margin it adds. "
      + "The other encoders are estimated the same way and not checked against GPU readings. "
      + "Estimated with torch " + data().versions.torch + " and transformers " + data().versions.transformers + ".";
  }

  // The choice in the address (?model=…&card=…), so a reload or a shared link restores it.
  const URL_FIELDS = ["model", "card", "memory", "length", "precision", "attention", "checkpointing", "optimizer",
    "adaptation", "rank", "frozen", "batch", "examples", "tokens"];

  function keepInUrl(choice) {
    const values = { ...choice, checkpointing: choice.checkpointing ? "1" : "0", batch: choice.effective_batch };
    const query = new URLSearchParams();
    for (const name of URL_FIELDS) {
      if ((name === "memory" && choice.card !== "custom") || (name === "tokens" && choice.tokens === null)) continue;
      if (name === "precision" && wanted.precision === null) continue; // the card's recipe, wherever it is opened
      if ((name === "rank" && choice.adaptation !== "lora") || (name === "frozen" && choice.adaptation !== "freeze")) {
        continue;
      }
      query.set(name, String(values[name]));
    }
    window.history.replaceState(null, "", "?" + query.toString() + window.location.hash);
  }

  function copyCommands() {
    const lines = $("plan-command").textContent + "\n" + $("train-command").textContent + "\n";
    const done = () => { $("copy").textContent = "Copied"; };
    const failed = () => { $("copy").textContent = "Could not copy: select the text"; };
    if (navigator.clipboard && window.isSecureContext) navigator.clipboard.writeText(lines).then(done, failed);
    else {
      const range = document.createRange();
      range.selectNodeContents($("commands-text"));
      window.getSelection().removeAllRanges();
      window.getSelection().addRange(range);
      $("copy").textContent = "Selected: press Ctrl+C";
    }
  }

  function start() {
    const d = data();
    const asked = new URLSearchParams(window.location.search);
    const given = (name, fallback) => (asked.has(name) ? asked.get(name) : fallback);
    const model = "google-bert/bert-base-uncased";
    fill($("model"), d.models.map((m) => [m.id, m.id + " (" + Math.round(m.parameters / 1e6) + " M)"]),
      given("model", model), model);
    fill($("card"), [...d.cards.map((c) => [c.key, c.name + " (" + gib(c.memory) + " GiB)"]),
      ["custom", "your card: its memory"]], given("card", "t4"), "t4");
    $("memory").value = given("memory", "11 GiB");
    fill($("optimizer"), Object.entries(OPTIMIZERS), given("optimizer", "adamw"), "adamw");
    fill($("adaptation"), Object.entries(ADAPTATIONS), given("adaptation", "full"), "full");
    fill($("checkpointing"), [["0", "off"], ["1", "on"]], given("checkpointing", "0"), "0");
    $("batch").value = given("batch", "32");
    $("examples").value = given("examples", String(d.epoch.examples));
    $("tokens").value = given("tokens", "");
    // values from an address are kept only where the page offers them (a length is matched to the nearest below)
    if (Number(asked.get("length")) > 0) wanted.length = Number(asked.get("length"));
    if (["fp32", "fp16", "bf16"].includes(asked.get("precision"))) wanted.precision = asked.get("precision");
    if (["sdpa", "eager"].includes(asked.get("attention"))) wanted.attention = asked.get("attention");
    for (const name of ["rank", "frozen"]) if (Number(asked.get(name)) > 0) wanted[name] = Number(asked.get(name));
    const typed = ["batch", "memory", "examples", "tokens"];
    for (const id of ["model", "card", "memory", "length", "precision", "attention", "checkpointing", "optimizer",
      "adaptation", "rank", "frozen", ...typed]) {
      $(id).addEventListener(typed.includes(id) ? "input" : "change", () => {
        if (id in wanted) wanted[id] = ["length", "rank", "frozen"].includes(id) ? Number($(id).value) : $(id).value;
        render();
      });
    }
    $("copy").addEventListener("click", copyCommands);
    validation();
    render();
    $("answer").hidden = false;
  }

  window.BertmemFit = { answer, alternatives, current, commands, parseMemory, epochEstimate, bookTokens, expand,
    workOf };
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
