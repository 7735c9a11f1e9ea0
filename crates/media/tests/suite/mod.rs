mod s3;
mod store;
