"""The microbatch loop of PipelineOptimizer (graphc/build/optimizers/pipeline.py)."""
