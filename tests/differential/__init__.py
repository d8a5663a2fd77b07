"""The differential and metamorphic fuzzer (issue 29 item 3): valid unusual models, same results.

    graphs.py     random valid ONNX graphs (opsets 11-21, dtypes, If/Loop/Scan, functions, IR 3)
    templates.py  symbolize's metamorphic templates: shape constants written from B and S
    oracle.py     run a chain (or symbolize) and judge: identical / different / exit 2 / crash;
                  for templates: pass / refused / wrong / crash
    campaign.py   the runs, seeded; minimizing a failure to a small reproducer
    table.py      the tables ``make fuzz`` prints
    repro/        symbolize's wrong readings, as seeds (symbolize.json)

    make fuzz FUZZ_VALID=3000 FUZZ_TEMPLATES=400      # or: PYTHONPATH=tests python -m differential
"""
