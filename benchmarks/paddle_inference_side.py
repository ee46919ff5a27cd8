"""Paddle Inference's side of bench_predictor.py, run by Paddle's own interpreter (it imports
only numpy and paddle): the same saved model, the same feeds, the same zero-copy calls.

``python paddle_inference_side.py SPEC.json``: SPEC names the model directory (graphc's
``save_inference_model`` output, Paddle's ProgramDesc format, which Paddle 3.x runs in its
legacy mode), the feeds (.npz), calls per round, rounds, threads and clock. It writes the
first output (``out.npy``) and prints one JSON line: the median time per call of each round.
"""

import json
import os
import statistics
import sys
import time

os.environ.setdefault("FLAGS_enable_pir_api", "0")  # before paddle: ProgramDesc models

import numpy as np  # noqa: E402
import paddle.inference as pi  # noqa: E402


def main(spec_path: str) -> int:
    with open(spec_path) as f:
        spec = json.load(f)
    config = pi.Config(spec["model_dir"])
    config.disable_gpu()
    config.disable_glog_info()
    config.set_cpu_math_library_num_threads(int(spec["threads"]))
    predictor = pi.create_predictor(config)
    handles = {n: predictor.get_input_handle(n) for n in predictor.get_input_names()}
    output = predictor.get_output_handle(predictor.get_output_names()[0])
    data = np.load(spec["feeds"])
    feeds = []  # each feed: {name: (array, offsets or None)}
    for i in range(int(spec["num_feeds"])):
        feeds.append({n: (data[f"{i}/{n}"], data[f"{i}/{n}/offsets"].tolist()
                          if f"{i}/{n}/offsets" in data else None) for n in handles})

    def run(feed):
        for name, handle in handles.items():
            array, offsets = feed[name]
            handle.copy_from_cpu(array)
            if offsets is not None:
                handle.set_lod([offsets])
        predictor.run()
        return output.copy_to_cpu()

    np.save(os.path.join(os.path.dirname(spec_path), "out.npy"),
            np.stack([run(feed) for feed in feeds]))
    clock = time.process_time if spec["clock"] == "cpu" else time.perf_counter
    for i in range(int(spec["warmup"])):
        run(feeds[i % len(feeds)])
    rounds = []
    for _ in range(int(spec["rounds"])):
        times = []
        for i in range(int(spec["per_round"])):
            feed = feeds[i % len(feeds)]
            start = clock()
            run(feed)
            times.append(clock() - start)
        rounds.append(statistics.median(times))
    print(json.dumps({"rounds": rounds}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
