//! The path records of `<infiniband/sa.h>`.

use super::ibv_gid;
use libc::c_int;

/// `struct ibv_sa_path_rec` (`<infiniband/sa.h>`): the route's path.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ibv_sa_path_rec {
    pub dgid: ibv_gid,
    pub sgid: ibv_gid,
    pub dlid: u16,
    pub slid: u16,
    pub raw_traffic: c_int,
    pub flow_label: u32,
    pub hop_limit: u8,
    pub traffic_class: u8,
    pub reversible: c_int,
    pub numb_path: u8,
    pub pkey: u16,
    pub sl: u8,
    pub mtu_selector: u8,
    pub mtu: u8,
    pub rate_selector: u8,
    pub rate: u8,
    pub packet_life_time_selector: u8,
    pub packet_life_time: u8,
    pub preference: u8,
}

/// `struct ibv_path_record` (`<infiniband/sa.h>`: the packed SA record,
/// big-endian), inside `struct ibv_path_data` (`RDMA_OPTION_IB_PATH`).
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ibv_path_record {
    pub service_id: u64,
    pub dgid: ibv_gid,
    pub sgid: ibv_gid,
    pub dlid: u16,
    pub slid: u16,
    pub flowlabel_hoplimit: u32,
    pub tclass: u8,
    pub reversible_numpath: u8,
    pub pkey: u16,
    pub qosclass_sl: u16,
    pub mtu: u8,
    pub rate: u8,
    pub packetlifetime: u8,
    pub preference: u8,
    pub reserved: [u8; 6],
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ibv_path_data {
    pub flags: u32,
    pub reserved: u32,
    pub path: ibv_path_record,
}
