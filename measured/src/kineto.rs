//! PyTorch profiler (Kineto) Chrome traces.
