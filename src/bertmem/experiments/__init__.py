"""Experiments: one run to an output folder, the bench and the lever comparison, statistics with their noise, and
cost (FLOPs, MFU).
"""

from bertmem.experiments.bench import VARIANTS, BenchConfig, run_bench, variant_settings
from bertmem.experiments.compare import ArmRun, Skip, arm_order, fit_arm
from bertmem.experiments.cost import matmul_tflops, model_flops_utilisation
from bertmem.experiments.levers import FULL, estimated_lever_rows, lever_recipes, run_levers
from bertmem.experiments.run import environment_info, predict_texts, run_experiment
from bertmem.experiments.stats import binomial_se, compare_accuracies, compare_paired, summarize

__all__ = ["ArmRun", "BenchConfig", "FULL", "Skip", "VARIANTS", "arm_order", "binomial_se", "compare_accuracies",
    "compare_paired", "environment_info", "estimated_lever_rows", "fit_arm", "lever_recipes", "matmul_tflops",
    "model_flops_utilisation", "predict_texts", "run_bench", "run_experiment", "run_levers", "summarize",
    "variant_settings"]
