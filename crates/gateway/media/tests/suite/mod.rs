mod s3;
mod store;
mod transfer;
