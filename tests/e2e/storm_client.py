#!/usr/bin/env python3
"""The storm half of availability_test.py, in its own process so that its threads never hold the
interpreter lock the latency probe needs: 500 open event streams on one job, 4 threads of
ListJobs with garbage page tokens and a 5 MB CreateJob every 0.5 s.

Usage: storm_client.py PORT STUBS_DIR JOB. Prints "ready" once the streams are open, storms
until stdin closes, then prints one JSON line: {"list": n, "create": n, "failures": [...]}.
"""
import json
import os
import sys
import threading

from harness import Client, load_stubs


def main():
    port, stubs_dir, job = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    client = Client(port, load_stubs(stubs_dir))
    grpc, stub, service_pb2 = client.grpc, client.stub, client.service_pb2
    stop = threading.Event()
    failures, counts = [], {"list": 0, "create": 0}

    def garbage_lists():
        while not stop.is_set():
            try:
                stub.ListJobs(service_pb2.ListJobsRequest(page_token=os.urandom(24).hex()),
                              timeout=10)
                failures.append("ListJobs accepted a garbage page token")
            except grpc.RpcError as e:
                if e.code() != grpc.StatusCode.INVALID_ARGUMENT:
                    failures.append(f"ListJobs: {e.code()}")
            counts["list"] += 1

    def big_creates():
        spec = client.spec(output="storm-big")
        spec.display_name = "x" * (5 << 20)
        while not stop.wait(0.5):
            try:
                stub.CreateJob(service_pb2.CreateJobRequest(spec=spec), timeout=10)
                failures.append("a 5 MB CreateJob was accepted")
            except grpc.RpcError as e:
                if e.code() not in (grpc.StatusCode.RESOURCE_EXHAUSTED,
                                    grpc.StatusCode.INVALID_ARGUMENT):
                    failures.append(f"CreateJob 5 MB: {e.code()}")
            counts["create"] += 1

    streams = [stub.StreamJobEvents(service_pb2.StreamJobEventsRequest(name=job))
               for _ in range(500)]
    workers = [threading.Thread(target=garbage_lists) for _ in range(4)]
    workers.append(threading.Thread(target=big_creates))
    for w in workers:
        w.start()
    print("ready", flush=True)
    sys.stdin.read()
    stop.set()
    for w in workers:
        w.join()
    for stream in streams:
        stream.cancel()
    print(json.dumps(dict(counts, failures=failures[:10])), flush=True)


if __name__ == "__main__":
    main()
