"""Replays twin's recorded single-GPU H200 steps through a candidate power-cap model.

The model: an exponential average x of the GPU's tensor-core activity (time constant tau); a
compute op's GEMM share runs 1 + k * max(0, x - x0) / (1 - x0) times longer than its
unthrottled price (k = 0.19 from the capped rate, 0.83-0.86 of the unthrottled one). The op
sequence and prices are the predicted critical path of each `twin verify step --backend cuda`
JSON in docs/measurements/raw/2026-11-30-h200-fp8/verify/ (quick-calibration profile); the
measured side is the GEMM class's measured over predicted time. Prints both per case for a grid
of tau and x0 (docs/journal/2026-11-30-gemm-power-cap.md has the result).

    python3 lab/scripts/power_cap_replay.py
"""
import json, math, sys
D='docs/measurements/raw/2026-11-30-h200-fp8/verify/'
def load(n):
    v=json.load(open(D+f'v-{n}.json'))
    g={x['group']:x for x in v['op_groups']}
    meas=sum(x['measured_s'] for k,x in g.items() if x['kind']=='gemm')
    pred=sum(x['predicted_s'] for k,x in g.items() if x['kind']=='gemm')
    steps=sorted(v['critical_path']['predicted']['steps'], key=lambda s:s['start_s'])
    ops=[(s['name'], s['on_path_s']) for s in steps]
    return meas/pred, ops, v['step_time_predicted_s']
def run(ops, share, tau, k, x0, gap_s=0.002, nsteps=12):
    x=0.0; res=[]
    for step in range(nsteps):
        base=0; slowed=0
        for name,d in ops:
            tensor = name.startswith('fwd') or name.startswith('bwd')
            u = 1.0 if tensor else 0.0
            if tensor:
                m = 1 + k*max(0.0,(x-x0))/(1-x0)
                dd = d*(1-share) + d*share*m
                base += d; slowed += dd
            else:
                dd = d
            # x relaxes toward u over dd (u for the tensor share of the op time)
            uu = share if tensor else 0.0
            x = uu + (x-uu)*math.exp(-dd/tau)
        x = x*math.exp(-gap_s/tau)
        res.append(slowed/base if base else 1)
    return sum(res[-5:])/5
cases={'bf16-quick':0.89,'bf16-quick-16L-mb2':0.91,'fp8-delayed-quick':0.82,'fp8-delayed-quick-16L-mb2':0.83}
for tau in [0.03,0.05,0.08]:
  for x0 in [0.0,0.17,0.3]:
    out=[]
    for n,share in cases.items():
        r,ops,st=load(n)
        out.append((n, r, run(ops,share,tau,0.19,x0)))
    print(f"tau {tau*1e3:.0f} ms x0 {x0}: "+"  ".join(f"{n.split('-quick')[0]}{'16L' if '16L' in n else ''} meas {r:.3f} model {m:.3f}" for n,r,m in out))
