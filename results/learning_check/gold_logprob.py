"""Mean summed log-probability of the gold answers under the base and every student of a checkpoint:
the diagnostic of diagnosis.md §4, written against commit c942033's population.py API (run it from
a checkout of that commit; later commits split population.py). Prints ONE JSON line.

    python results/learning_check/gold_logprob.py CKPT DATA_DIR   # DATA_DIR holds a tiny.jsonl

The gold response is the warm start's own answer format (tinyworld.transcripts): its think line,
then the gold output / input / program in the answer fence, then the end-of-text token.
"""
import json
import os
import sys

import torch

ROOT = os.getcwd()
sys.path.insert(0, ROOT)

import evaluate  # noqa: E402
import population  # noqa: E402
import tinyworld  # noqa: E402

THINK = {"code_o": "Let me run the code on the input.",
         "code_i": "Let me find an input that gives this output.",
         "code_f": "Let me match the pairs and the message."}
FENCE = {"code_o": ("output", "output"), "code_i": ("input", "input"),
         "code_f": ("python", "program")}
TASKS = ("code_i", "code_o", "code_f")


def main(ckpt, data_dir):
    with open(os.path.join(ckpt, "state.json")) as f:
        state = json.load(f)
    run = state["config"]
    base, tokenizer, _ = population.load_base(run["model"], "float32", "cpu", "out/.tiny")
    roles = [m["role"] for m in state["members"]] + ["both"]  # the extra zero-B slot is the base
    model, members = population.init_population(base, tokenizer, run, roles)
    population.load_checkpoint(ckpt, model, members[:-1], {})
    items = evaluate.load_benchmark("tiny", data_dir)
    prompts, completions = [], []
    for item in items:
        tag, key = FENCE[item["task"]]
        response = f" {THINK[item['task']]} </think> <answer>```{tag}\n{item['problem'][key]}\n```"
        response += "</answer>" + tinyworld.END
        prompt = evaluate.make_prompt("tiny", item, {})
        prompts.append(tokenizer(prompt, add_special_tokens=False)["input_ids"])
        completions.append(tokenizer(response, add_special_tokens=False)["input_ids"])
    model.eval()
    out = {}
    for member in members:
        totals = []
        with torch.no_grad():
            for start in range(0, len(prompts), 16):
                logp, mask, _ = population.token_logprobs(model, member["name"],
                                                          prompts[start:start + 16],
                                                          completions[start:start + 16])
                totals += (logp * mask).sum(1).tolist()
        name = "base" if member["role"] == "both" else member["name"]
        row = {}
        for task in TASKS:
            mine = [t for t, item in zip(totals, items) if item["task"] == task]
            row[task] = round(sum(mine) / len(mine), 3)
        row["all"] = round(sum(totals) / len(totals), 3)
        out[name] = row
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
