#!/bin/bash
set -e
sed -i 's#source config/site.env#source conf/site.env#' deploy.sh && ./deploy.sh
