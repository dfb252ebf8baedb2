"""The trajectory viewer: run dirs -> a self-contained static site (opens from disk, no network).

index.html: the runs, their curves (inline SVG from metrics.jsonl) and a table of episodes with
filters (run, env, task, step, mode, outcome, status, policy version). rK/eN.html: one page per
episode, each turn's new prompt part, its response coloured token by token (experiments.view.
tokens says by what), the next state (screenshots for GUI turns, shell output as a terminal
shows it), the status, the PRM votes with the judge's texts, the OPD hint and the outcome.
compare.html: two episodes side by side (the index links each episode to the same task at the
same step in another run).
"""
