//! Graph-aware context parallelism: exact ring attention over the blocks of a sequence.
//!
//! A sequence of `S` nodes is split into `cp` blocks of `S / cp` nodes; ring position `r` holds
//! the queries, keys and values of block `r` and the ROWS of the distance index for its nodes,
//! `[batch, S / cp, S]`. The key/value blocks travel around the ring: at hop `t` position `r`
//! holds the block of position `(r - t) mod cp` and calls the attention op with
//! `column_offset = owner * S / cp` (so it reads the right index columns) and that block's key
//! padding mask, which travels with it. The partial results are merged exactly with
//! [`merge_partials`]. The distance index and the bias table are never sent.
//!
//! Backward (a custom autodiff node per position, see [`ContextParallelBackend`]): the node
//! recomputes each block's contribution from the merged output and log-sum-exp (the standard
//! ring/flash-attention backward), the key/value blocks travel the ring again, and the
//! gradients of K and V accumulate while travelling until they arrive back at their owner
//! (one more hop). The gradients of Q and of the table stay local; the table's partial
//! gradients of all positions are summed by the data x context gradient all-reduce.
//!
//! A position blocked in the ring backward holds its autodiff graph's lock, and Burn 0.21
//! locks every graph at the end of any `backward()`; [`RingEndpoint::barrier`] keeps that from
//! turning into a deadlock when a pipeline also makes ranks wait on each other.
//!
//! All positions of a ring must run the same calls in the same order (same layers, same
//! micro-batches); every message is tagged with its [`RingCall`], phase and hop, and a mismatch
//! is reported as [`ParallelError::OutOfOrder`] instead of silently mixing blocks.

use core::marker::PhantomData;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use burn::backend::Autodiff;
use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::tensor::backend::Backend;
use burn::tensor::ops::{BoolTensor, FloatTensor};
use burn::tensor::{Tensor, TensorPrimitive};
use megagraph_kernels::{
    AttentionBias, AttentionError, AttentionOptions, AttentionOutput, DistanceBiasPrimitive,
    GraphAttentionAutodiffBackend, GraphAttentionBackend, GraphAttentionInputs, merge_partials,
};

use crate::ParallelError;
use crate::mesh::{Control, receive};

/// Identifies one ring attention call: the step, micro-batch and layer it belongs to. Every
/// position of a ring makes the same calls in the same order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct RingCall {
    /// Optimizer step (counted by the caller).
    pub step: u64,
    /// Micro-batch within the step.
    pub micro: usize,
    /// Global layer index.
    pub layer: usize,
}

/// Forward or backward half of a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Forward,
    Backward,
    Barrier,
}

/// Tag of one ring message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct RingTag {
    call: RingCall,
    phase: Phase,
    hop: usize,
}

impl fmt::Display for RingTag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:?} ring block of step {} micro-batch {} layer {} hop {}",
            self.phase, self.call.step, self.call.micro, self.call.layer, self.hop
        )
    }
}

/// A key/value block travelling the ring, with the key padding mask of its nodes and, in the
/// backward pass, the gradients accumulated for it so far.
#[derive(Clone, Debug)]
struct Block<B: Backend> {
    /// Ring position whose nodes these are.
    owner: usize,
    /// `[batch, heads, block, head_dim]`; absent on the last backward hop (only gradients travel).
    k: Option<FloatTensor<B>>,
    /// `[batch, heads, block, head_dim]`; absent on the last backward hop.
    v: Option<FloatTensor<B>>,
    /// `[batch, block]`, `true` = padding.
    mask: Option<BoolTensor<B>>,
    /// Gradient of the keys accumulated so far (backward only).
    dk: Option<FloatTensor<B>>,
    /// Gradient of the values accumulated so far (backward only).
    dv: Option<FloatTensor<B>>,
}

/// One message between ring neighbours.
#[derive(Debug)]
struct RingMessage<B: Backend> {
    tag: RingTag,
    block: Block<B>,
}

/// One position's endpoint of a context-parallel ring: a channel to the next position, one from
/// the previous position, and where failures inside the backward pass are recorded.
///
/// Build a ring with [`RingEndpoint::ring`] (one endpoint per thread) or let a
/// [`ParallelTrainer`](crate::ParallelTrainer) build its mesh.
pub struct RingEndpoint<B: Backend> {
    position: usize,
    size: usize,
    rank: usize,
    device: B::Device,
    next: Sender<RingMessage<B>>,
    prev: Mutex<Receiver<RingMessage<B>>>,
    control: Arc<Control>,
    failure: Mutex<Option<ParallelError>>,
    /// Time spent waiting for the previous position, in nanoseconds.
    waited_nanos: AtomicU64,
}

impl<B: Backend> fmt::Debug for RingEndpoint<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RingEndpoint")
            .field("position", &self.position)
            .field("size", &self.size)
            .field("rank", &self.rank)
            .finish_non_exhaustive()
    }
}

impl<B: Backend> RingEndpoint<B> {
    /// A standalone ring of `devices.len()` positions (position `i` on `devices[i]`), whose
    /// receives give up after `timeout`. Hand one endpoint to each thread.
    pub fn ring(devices: &[B::Device], timeout: Duration) -> Vec<Arc<Self>> {
        let control = Arc::new(Control::new(timeout));
        let ranks: Vec<usize> = (0..devices.len()).collect();
        Self::build(&ranks, devices, &control)
    }

    /// Endpoints for the ring of mesh ranks `ranks` (in ring order) on `devices`.
    pub(crate) fn build(
        ranks: &[usize],
        devices: &[B::Device],
        control: &Arc<Control>,
    ) -> Vec<Arc<Self>> {
        let size = ranks.len();
        // position p receives on receivers[p] and sends on senders[p + 1]; the originals drop
        // at the end, so a stopped position closes its neighbour's channel
        let (senders, receivers): (Vec<Sender<RingMessage<B>>>, Vec<_>) =
            (0..size).map(|_| channel()).unzip();
        receivers
            .into_iter()
            .enumerate()
            .map(|(position, prev)| {
                Arc::new(RingEndpoint {
                    position,
                    size,
                    rank: ranks[position],
                    device: devices[position].clone(),
                    next: senders[(position + 1) % size].clone(),
                    prev: Mutex::new(prev),
                    control: control.clone(),
                    failure: Mutex::new(None),
                    waited_nanos: AtomicU64::new(0),
                })
            })
            .collect()
    }

    /// This endpoint's position in the ring.
    pub fn position(&self) -> usize {
        self.position
    }

    /// The number of positions.
    pub fn size(&self) -> usize {
        self.size
    }

    /// The mesh rank of this endpoint (its position for a standalone ring).
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// Total time this endpoint spent waiting for ring messages, in seconds.
    pub fn waited_seconds(&self) -> f64 {
        self.waited_nanos.load(Ordering::Relaxed) as f64 * 1e-9
    }

    /// Stops every endpoint of this ring (their waits return [`ParallelError::Aborted`]).
    pub fn abort(&self) {
        self.control.abort();
    }

    /// Takes the failure recorded inside a backward pass, if any. A backward node cannot
    /// return an error: it records it here, gives zero gradients, and the caller checks after
    /// `backward()`.
    pub fn take_failure(&self) -> Option<ParallelError> {
        self.failure.lock().ok().and_then(|mut slot| slot.take())
    }

    fn record_failure(&self, error: ParallelError) {
        log::error!(
            "rank {}: ring attention backward failed: {error}",
            self.rank
        );
        self.control.abort();
        if let Ok(mut slot) = self.failure.lock()
            && slot.is_none()
        {
            *slot = Some(error);
        }
    }

    /// Returns once every position of the ring has called `barrier` for `call` (`size - 1`
    /// rounds of empty messages around the ring: after round `t` a position knows that the
    /// `t + 1` positions before it arrived).
    ///
    /// Call it right before a `backward()` whose graph holds ring attention when anything else
    /// can make a ring peer wait (a pipeline stage waiting for its gradient). Burn 0.21's
    /// autodiff locks every live graph, one after the other, at the end of each `backward()`
    /// (orphan cleanup), so a position blocked in a ring backward holds its graph's lock; if a
    /// peer were still waiting for a rank that is itself stuck in that cleanup, the three would
    /// deadlock. Once every peer passed the barrier, a ring backward only waits on peers that
    /// are already inside theirs.
    ///
    /// # Errors
    ///
    /// A communication failure (lost peer, abort, timeout, out-of-order message).
    pub fn barrier(&self, call: RingCall) -> Result<(), ParallelError> {
        for hop in 0..self.size.saturating_sub(1) {
            let tag = RingTag {
                call,
                phase: Phase::Barrier,
                hop,
            };
            let empty = Block {
                owner: self.position,
                k: None,
                v: None,
                mask: None,
                dk: None,
                dv: None,
            };
            self.send(tag, empty)?;
            self.receive(tag)?;
        }
        Ok(())
    }

    fn send(&self, tag: RingTag, block: Block<B>) -> Result<(), ParallelError> {
        self.next
            .send(RingMessage { tag, block })
            .map_err(|_| ParallelError::PeerGone {
                rank: self.rank,
                waiting_for: format!("the next ring position ({tag})"),
            })
    }

    fn receive(&self, tag: RingTag) -> Result<Block<B>, ParallelError> {
        let prev = self
            .prev
            .lock()
            .map_err(|_| ParallelError::WorkerPanicked {
                rank: self.rank,
                message: "ring receiver lock poisoned".into(),
            })?;
        let started = Instant::now();
        let message = receive(&prev, &self.control, self.rank, || tag.to_string());
        self.waited_nanos
            .fetch_add(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
        let message = message?;
        if message.tag != tag {
            return Err(ParallelError::OutOfOrder {
                rank: self.rank,
                expected: tag.to_string(),
                got: message.tag.to_string(),
            });
        }
        let device = &self.device;
        let block = message.block;
        Ok(Block {
            owner: block.owner,
            k: block.k.map(|t| B::float_to_device(t, device)),
            v: block.v.map(|t| B::float_to_device(t, device)),
            mask: block.mask.map(|t| B::bool_to_device(t, device)),
            dk: block.dk.map(|t| B::float_to_device(t, device)),
            dv: block.dv.map(|t| B::float_to_device(t, device)),
        })
    }
}

/// An autodiff backend that runs ring attention with its own backward node.
///
/// Implemented for every [`Autodiff`] backend whose inner backend runs the graph attention op;
/// training code bounds on this trait.
pub trait ContextParallelBackend: GraphAttentionAutodiffBackend {
    /// Ring attention at the primitive level. `inputs` are this position's
    /// `q`, `k`, `v` (`[batch, heads, block, head_dim]`), its distance index rows
    /// (`[batch, block, block * ring size]`; the column offset is set per hop) with the table,
    /// and its key padding mask (`[batch, block]`). Returns the packed
    /// `[batch, heads, block, head_dim + 1]` result (output, then log-sum-exp), like
    /// [`GraphAttentionBackend::graph_attention_forward`].
    ///
    /// # Errors
    ///
    /// A communication failure with a ring neighbour.
    fn ring_attention_packed(
        inputs: GraphAttentionInputs<Self>,
        ring: &Arc<RingEndpoint<Self::InnerBackend>>,
        call: RingCall,
    ) -> Result<FloatTensor<Self>, ParallelError>;
}

/// Backward step of ring attention. Parents: `[q, k, v, table]`.
#[derive(Debug)]
struct RingAttentionBackward<B> {
    _backend: PhantomData<B>,
}

/// What the backward step keeps: this position's inner inputs, the merged packed result, the
/// ring and the call it belongs to.
#[derive(Clone, Debug)]
struct RingState<B: Backend> {
    inputs: GraphAttentionInputs<B>,
    packed: FloatTensor<B>,
    ring: Arc<RingEndpoint<B>>,
    call: RingCall,
}

impl<B: GraphAttentionBackend> Backward<B, 4> for RingAttentionBackward<B> {
    type State = RingState<B>;

    fn backward(
        self,
        ops: Ops<Self::State, 4>,
        grads: &mut Gradients,
        _checkpointer: &mut Checkpointer,
    ) {
        let [node_q, node_k, node_v, node_table] = ops.parents;
        let packed_grad = grads.consume::<B>(&ops.node);
        let RingState {
            inputs,
            packed,
            ring,
            call,
        } = ops.state;
        let zeros = zero_grads(&inputs);
        let result = match ring_backward(inputs, packed, packed_grad, &ring, call) {
            Ok(result) => result,
            Err(error) => {
                ring.record_failure(error);
                zeros
            }
        };
        for (node, grad) in [
            (node_q, result.q),
            (node_k, result.k),
            (node_v, result.v),
            (node_table, result.table),
        ] {
            if let Some(node) = node {
                grads.register::<B>(node.id, grad);
            }
        }
    }
}

impl<B: GraphAttentionBackend, C: CheckpointStrategy> ContextParallelBackend for Autodiff<B, C> {
    fn ring_attention_packed(
        inputs: GraphAttentionInputs<Self>,
        ring: &Arc<RingEndpoint<B>>,
        call: RingCall,
    ) -> Result<FloatTensor<Self>, ParallelError> {
        let Some(distance) = inputs.distance else {
            return Err(ParallelError::Unsupported {
                rank: ring.rank,
                what: "ring attention without a distance bias",
            });
        };
        if inputs.dense.is_some() {
            return Err(ParallelError::Unsupported {
                rank: ring.rank,
                what: "a dense attention bias in ring attention",
            });
        }
        let nodes = [
            inputs.q.node.clone(),
            inputs.k.node.clone(),
            inputs.v.node.clone(),
            distance.table.node.clone(),
        ];
        let inner = GraphAttentionInputs::<B> {
            q: inputs.q.primitive,
            k: inputs.k.primitive,
            v: inputs.v.primitive,
            distance: Some(DistanceBiasPrimitive {
                index: distance.index.cast(),
                table: distance.table.primitive,
                column_offset: 0,
            }),
            dense: None,
            key_padding_mask: inputs.key_padding_mask,
            scale: inputs.scale,
            block_size: inputs.block_size,
        };
        // communicate before registering the node, so an error leaves no half-built graph
        let packed = ring_forward(&inner, ring, call)?;
        let step = RingAttentionBackward::<B> {
            _backend: PhantomData,
        };
        Ok(match step.prepare::<C>(nodes).compute_bound().stateful() {
            OpsKind::Tracked(prep) => {
                let state = RingState {
                    inputs: inner,
                    packed: packed.clone(),
                    ring: ring.clone(),
                    call,
                };
                prep.finish(state, packed)
            }
            OpsKind::UnTracked(prep) => prep.finish(packed),
        })
    }
}

/// Gradients of one position's inputs.
struct RingGrads<B: Backend> {
    q: FloatTensor<B>,
    k: FloatTensor<B>,
    v: FloatTensor<B>,
    table: FloatTensor<B>,
}

fn float<B: Backend, const D: usize>(primitive: FloatTensor<B>) -> Tensor<B, D> {
    Tensor::from_primitive(TensorPrimitive::Float(primitive))
}

fn primitive<B: Backend, const D: usize>(tensor: Tensor<B, D>) -> FloatTensor<B> {
    tensor.into_primitive().tensor()
}

/// The inputs of the op for `block`: this position's queries and index rows, the block's keys,
/// values and mask, and the index columns of the block's owner.
fn hop_inputs<B: Backend>(
    local: &GraphAttentionInputs<B>,
    block: &Block<B>,
    k: FloatTensor<B>,
    v: FloatTensor<B>,
) -> GraphAttentionInputs<B> {
    let block_len = float::<B, 4>(local.q.clone()).dims()[2];
    GraphAttentionInputs {
        q: local.q.clone(),
        k,
        v,
        distance: local.distance.as_ref().map(|d| DistanceBiasPrimitive {
            index: d.index.clone(),
            table: d.table.clone(),
            column_offset: block.owner * block_len,
        }),
        dense: None,
        key_padding_mask: block.mask.clone(),
        scale: local.scale,
        block_size: local.block_size,
    }
}

fn missing(rank: usize, what: &str) -> ParallelError {
    ParallelError::OutOfOrder {
        rank,
        expected: format!("a ring block with {what}"),
        got: "a block without it".to_string(),
    }
}

/// Forward ring on the inner backend: the merged packed result of this position's queries over
/// every block of keys.
fn ring_forward<B: GraphAttentionBackend>(
    local: &GraphAttentionInputs<B>,
    ring: &RingEndpoint<B>,
    call: RingCall,
) -> Result<FloatTensor<B>, ParallelError> {
    let mut block = Block {
        owner: ring.position,
        k: Some(local.k.clone()),
        v: Some(local.v.clone()),
        mask: local.key_padding_mask.clone(),
        dk: None,
        dv: None,
    };
    let mut parts = Vec::with_capacity(ring.size);
    for hop in 0..ring.size {
        let tag = RingTag {
            call,
            phase: Phase::Forward,
            hop,
        };
        let last = hop + 1 == ring.size;
        if !last {
            // send first: the neighbour's receive overlaps this hop's compute
            ring.send(tag, block.clone())?;
        }
        let k = block.k.clone().ok_or_else(|| missing(ring.rank, "keys"))?;
        let v = block
            .v
            .clone()
            .ok_or_else(|| missing(ring.rank, "values"))?;
        let packed: Tensor<B, 4> =
            float(B::graph_attention_forward(hop_inputs(local, &block, k, v)));
        parts.push(unpack(packed));
        if !last {
            block = ring.receive(tag)?;
        }
    }
    let merged = merge_partials(parts).map_err(|source| ParallelError::Attention {
        rank: ring.rank,
        source,
    })?;
    Ok(primitive(pack(merged)))
}

/// Splits a packed `[.., head_dim + 1]` result into output and log-sum-exp.
fn unpack<B: Backend>(packed: Tensor<B, 4>) -> AttentionOutput<B> {
    let [batch, heads, len, width] = packed.dims();
    let head_dim = width - 1;
    AttentionOutput {
        output: packed
            .clone()
            .slice([0..batch, 0..heads, 0..len, 0..head_dim]),
        lse: packed
            .slice([0..batch, 0..heads, 0..len, head_dim..width])
            .reshape([batch, heads, len]),
    }
}

/// The packed layout of an [`AttentionOutput`].
fn pack<B: Backend>(result: AttentionOutput<B>) -> Tensor<B, 4> {
    Tensor::cat(vec![result.output, result.lse.unsqueeze_dim(3)], 3)
}

fn zero_grads<B: Backend>(inputs: &GraphAttentionInputs<B>) -> RingGrads<B> {
    let zeros4 = |t: &FloatTensor<B>| primitive(float::<B, 4>(t.clone()).zeros_like());
    let table = inputs.distance.as_ref().map_or_else(
        || primitive(Tensor::<B, 2>::zeros([1, 1], &B::float_device(&inputs.q))),
        |d| primitive(float::<B, 2>(d.table.clone()).zeros_like()),
    );
    RingGrads {
        q: zeros4(&inputs.q),
        k: zeros4(&inputs.k),
        v: zeros4(&inputs.v),
        table,
    }
}

fn add<B: Backend, const D: usize>(acc: Tensor<B, D>, grad: FloatTensor<B>) -> Tensor<B, D> {
    acc + float::<B, D>(grad)
}

/// Backward ring on the inner backend: every block's contribution is recomputed from the merged
/// result; K/V gradients travel with their block and come home after one more hop.
fn ring_backward<B: GraphAttentionBackend>(
    local: GraphAttentionInputs<B>,
    packed_output: FloatTensor<B>,
    packed_grad: FloatTensor<B>,
    ring: &RingEndpoint<B>,
    call: RingCall,
) -> Result<RingGrads<B>, ParallelError> {
    let zeros = zero_grads(&local);
    let mut d_q: Tensor<B, 4> = float(zeros.q);
    let mut d_table: Tensor<B, 2> = float(zeros.table);
    let mut block = Block {
        owner: ring.position,
        k: Some(local.k.clone()),
        v: Some(local.v.clone()),
        mask: local.key_padding_mask.clone(),
        dk: Some(zeros.k),
        dv: Some(zeros.v),
    };
    for hop in 0..ring.size {
        let k = block.k.take().ok_or_else(|| missing(ring.rank, "keys"))?;
        let v = block.v.take().ok_or_else(|| missing(ring.rank, "values"))?;
        let inputs = hop_inputs(&local, &block, k.clone(), v.clone());
        let grads = B::graph_attention_backward(inputs, packed_output.clone(), packed_grad.clone());
        d_q = add(d_q, grads.q);
        if let Some(table) = grads.table {
            d_table = add(d_table, table);
        }
        let dk = block
            .dk
            .take()
            .ok_or_else(|| missing(ring.rank, "key gradients"))?;
        let dv = block
            .dv
            .take()
            .ok_or_else(|| missing(ring.rank, "value gradients"))?;
        let dk = primitive(add::<B, 4>(float(dk), grads.k));
        let dv = primitive(add::<B, 4>(float(dv), grads.v));
        if ring.size == 1 {
            block.dk = Some(dk);
            block.dv = Some(dv);
            break;
        }
        let tag = RingTag {
            call,
            phase: Phase::Backward,
            hop,
        };
        let last = hop + 1 == ring.size;
        // on the last hop only the gradients travel: the next position owns this block
        let outgoing = Block {
            owner: block.owner,
            k: (!last).then_some(k),
            v: (!last).then_some(v),
            mask: if last { None } else { block.mask.take() },
            dk: Some(dk),
            dv: Some(dv),
        };
        ring.send(tag, outgoing)?;
        block = ring.receive(tag)?;
    }
    if block.owner != ring.position {
        return Err(ParallelError::OutOfOrder {
            rank: ring.rank,
            expected: format!("the gradients of ring block {}", ring.position),
            got: format!("those of block {}", block.owner),
        });
    }
    Ok(RingGrads {
        q: primitive(d_q),
        k: block
            .dk
            .ok_or_else(|| missing(ring.rank, "key gradients"))?,
        v: block
            .dv
            .ok_or_else(|| missing(ring.rank, "value gradients"))?,
        table: primitive(d_table),
    })
}

/// Exact biased attention of this ring position's queries over the whole sequence.
///
/// - `q`, `k`, `v`: this position's block, `[batch, heads, block, head_dim]`
/// - `bias.distance` (required): this position's index ROWS, `[batch, block, block * ring
///   size]` (its `column_offset` is ignored: each hop sets the offset of the block it holds),
///   and the table `[buckets, heads]`
/// - `bias.key_padding_mask` (optional): this position's block, `[batch, block]`,
///   `true` = padding; it travels the ring with the block's keys
/// - `bias.dense`: not supported
/// - returns the output `[batch, heads, block, head_dim]` and log-sum-exp `[batch, heads, block]`
///   over all keys, equal to [`graph_attention`](megagraph_kernels::graph_attention) on the whole
///   sequence restricted to this block's rows.
///
/// Every position of `ring` must make the same calls, in the same order, with the same `call`.
/// Differentiable in `q`, `k`, `v` and the table; the backward pass communicates over the ring
/// too, and a failure there is reported by [`RingEndpoint::take_failure`] after `backward()`.
///
/// # Errors
///
/// [`ParallelError::Attention`] for inconsistent shapes, [`ParallelError::Unsupported`] without
/// a distance bias or with a dense bias, a communication error otherwise.
pub fn ring_attention<B: ContextParallelBackend>(
    q: Tensor<B, 4>,
    k: Tensor<B, 4>,
    v: Tensor<B, 4>,
    bias: AttentionBias<B>,
    options: &AttentionOptions,
    ring: &Arc<RingEndpoint<B::InnerBackend>>,
    call: RingCall,
) -> Result<AttentionOutput<B>, ParallelError> {
    let rank = ring.rank;
    let fail = |source: AttentionError| ParallelError::Attention { rank, source };
    if bias.dense.is_some() {
        return Err(ParallelError::Unsupported {
            rank,
            what: "a dense attention bias in ring attention (it would have to travel the ring)",
        });
    }
    let Some(distance) = bias.distance else {
        return Err(ParallelError::Unsupported {
            rank,
            what: "ring attention without a distance bias",
        });
    };
    let [batch, heads, block, head_dim] = q.dims();
    let expect =
        |tensor: &'static str, actual: Vec<usize>, expected: Vec<(&'static str, usize)>| {
            for (&size, (dim, want)) in actual.iter().zip(expected) {
                if size != want {
                    return Err(fail(AttentionError::ShapeMismatch {
                        tensor,
                        dim,
                        expected: want,
                        actual: size,
                        shape: actual.clone(),
                    }));
                }
            }
            Ok(())
        };
    let qkv = vec![
        ("batch", batch),
        ("heads", heads),
        ("block", block),
        ("head_dim", head_dim),
    ];
    expect("k", k.dims().to_vec(), qkv.clone())?;
    expect("v", v.dims().to_vec(), qkv)?;
    expect(
        "distance.index",
        distance.index.dims().to_vec(),
        vec![
            ("batch", batch),
            ("block", block),
            ("total_k_len", block * ring.size),
        ],
    )?;
    let table_dims = distance.table.dims().to_vec();
    expect(
        "distance.table",
        table_dims.clone(),
        vec![("buckets", table_dims[0]), ("heads", heads)],
    )?;
    if let Some(mask) = &bias.key_padding_mask {
        expect(
            "key_padding_mask",
            mask.dims().to_vec(),
            vec![("batch", batch), ("block", block)],
        )?;
    }
    for (tensor, dim, size, shape) in [
        ("q", "batch", batch, q.dims().to_vec()),
        ("q", "heads", heads, q.dims().to_vec()),
        ("q", "block", block, q.dims().to_vec()),
        ("q", "head_dim", head_dim, q.dims().to_vec()),
        (
            "distance.table",
            "buckets",
            table_dims[0],
            table_dims.clone(),
        ),
    ] {
        if size == 0 {
            return Err(fail(AttentionError::EmptyDimension { tensor, dim, shape }));
        }
    }
    if options.block_size == 0 {
        return Err(fail(AttentionError::ZeroBlockSize));
    }
    let scale = options.scale.unwrap_or(1.0 / (head_dim as f32).sqrt());
    if !scale.is_finite() {
        return Err(fail(AttentionError::NonFiniteScale(scale)));
    }
    let inputs = GraphAttentionInputs::<B> {
        q: primitive(q),
        k: primitive(k),
        v: primitive(v),
        distance: Some(DistanceBiasPrimitive {
            index: distance.index.into_primitive(),
            table: primitive(distance.table),
            column_offset: 0,
        }),
        dense: None,
        key_padding_mask: bias.key_padding_mask.map(|mask| mask.into_primitive()),
        scale,
        block_size: options.block_size,
    };
    let packed: Tensor<B, 4> = float(B::ring_attention_packed(inputs, ring, call)?);
    Ok(unpack(packed))
}
